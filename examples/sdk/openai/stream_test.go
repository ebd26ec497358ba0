package main

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/retryhttp/retryhttp/examples/sdk/internal/sdktest"
	"github.com/retryhttp/retryhttp/retrytest"
)

// An OpenAI-compatible server can open a 200 stream with an error chunk,
// data: {"error":{"type":"server_error",...}}. retryhttp reads that first
// chunk before handing the stream over and retries the attempt as the 500
// it stands for: the SDK reads one clean stream.
func TestStreamOpeningWithServerErrorIsRetried(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: retrytest.MustParseScript("stream:server_error, stream")})

	acc, err := askStream(context.Background(), testClient(srv, clk), testModel, "hello", false)

	if err != nil {
		t.Fatalf("the SDK's stream failed: %v", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "ok" || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("the SDK gathered %+v, want one choice \"ok\" that stopped", acc.Choices)
	}
	st := srv.Stats()
	if st.Attempts != 2 {
		t.Errorf("the provider saw %d attempts, want 2", st.Attempts)
	}
	sdktest.SDKCall(t, st, 200, 200)
	sdktest.SameBody(t, st, 0)
	if got, want := clk.Sleeps(), []time.Duration{time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v (one backoff)", got, want)
	}
}

// Once a stream's first chunk has reached the SDK, an error chunk later is
// not retried: it reaches the SDK as its own *ssestream.StreamError after
// exactly one attempt, with the chunks before it gathered.
func TestStreamFailingAfterItsFirstEventIsTheSDKsError(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.OpenAI, retrytest.Config{Script: []retrytest.Step{
		{Stream: &retrytest.Stream{ErrorType: "server_error", ErrorAfter: 2}}, // after the role and "ok" chunks
		{Stream: &retrytest.Stream{}},                                         // what a retry would get
	}})

	acc, err := askStream(context.Background(), testClient(srv, clk), testModel, "hello", false)

	var streamErr *ssestream.StreamError
	if !errors.As(err, &streamErr) {
		t.Fatalf("err = %#v, want an *ssestream.StreamError", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "ok" {
		t.Errorf("the SDK gathered %+v before the error, want the \"ok\" chunk", acc.Choices)
	}
	st := srv.Stats()
	if st.Attempts != 1 {
		t.Errorf("the provider saw %d attempts, want exactly 1", st.Attempts)
	}
	sdktest.SDKCall(t, st, 200)
}
