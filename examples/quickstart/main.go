// Command quickstart shows retryhttp in an ordinary program: an http.Client
// whose Transport is a RetryTransport, talking to a flaky server (embedded
// here on loopback so the example runs anywhere), and the error handling a
// caller writes around it.
//
//	go run ./examples/quickstart
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"

	"github.com/retryhttp/retryhttp"
)

func main() {
	// A server that is overloaded twice, then answers.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(529)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		io.WriteString(w, `{"answer":42}`)
	}))
	defer srv.Close()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	client := &http.Client{Transport: retryhttp.New(nil, retryhttp.WithLogger(logger))}

	resp, err := client.Get(srv.URL + "/v1/answer")
	if err := retryhttp.CheckResponse(resp, err); err != nil {
		var rerr *retryhttp.Error
		if errors.As(err, &rerr) {
			fmt.Println("for the user:", rerr.UserMessage())
		}
		fmt.Println("for the log:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s after %d attempts\n", resp.StatusCode, body, retryhttp.Attempts(resp))
}
