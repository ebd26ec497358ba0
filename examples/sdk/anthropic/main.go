// Command anthropic sends one message to the Anthropic Messages API with the
// official Go SDK, and lets retryhttp do the retrying underneath it.
//
//	ANTHROPIC_API_KEY=sk-ant-... go run ./anthropic "Why is the sky blue?"
//
// ANTHROPIC_BASE_URL sends the request elsewhere (a gateway, or a retrytest
// server), ANTHROPIC_MODEL picks the model. Retries are logged to stderr;
// the answer goes to stdout. Without ANTHROPIC_API_KEY it says what to set
// and exits 0 without touching the network, so running every example on a
// machine without keys is not a failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/retryhttp/retryhttp"
)

const (
	defaultModel  = anthropic.ModelClaudeHaiku5_5
	defaultPrompt = "In one sentence: why do HTTP clients retry with jitter?"
	maxTokens     = 256
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newClient returns an Anthropic client whose HTTP requests all go through
// retryhttp, configured by opts. baseURL "" keeps the SDK's production URL.
func newClient(baseURL, apiKey string, opts ...retryhttp.Option) anthropic.Client {
	httpClient := &http.Client{Transport: retryhttp.New(nil, opts...)}
	sdkOpts := []option.RequestOption{
		// The caller has read the environment already. Without this the
		// SDK reads it again, and its credential chain (profiles, config
		// files) could pick a key or URL other than the ones given here.
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(apiKey),
		option.WithHTTPClient(httpClient),
		// retryhttp retries; the SDK must not retry on top of it. Stacked,
		// every SDK attempt would be a whole retryhttp retry loop: with the
		// defaults (SDK 2 retries, retryhttp 5) one call could send 18
		// requests, and the SDK's waits would ignore the rate-limit state
		// retryhttp keeps.
		option.WithMaxRetries(0),
	}
	if baseURL != "" {
		sdkOpts = append(sdkOpts, option.WithBaseURL(baseURL))
	}
	return anthropic.NewClient(sdkOpts...)
}

// ask sends prompt as a one-message conversation.
func ask(ctx context.Context, client anthropic.Client, model, prompt string) (*anthropic.Message, error) {
	return client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock(prompt)),
		},
	})
}

// askStream sends prompt as a one-message conversation and reads the answer
// as a stream, gathering its events into the message. retryhttp retries a
// stream that opens with an error event (overloaded_error) before any byte
// of it reaches the SDK; an error later in the stream is not retried (part
// of the answer has been read) and comes back here from stream.Err as the
// SDK's own *anthropic.Error, with the message gathered so far.
func askStream(ctx context.Context, client anthropic.Client, model, prompt string) (*anthropic.Message, error) {
	stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model:     anthropic.Model(model),
		MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock(prompt)),
		},
	})
	defer stream.Close()
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			return &msg, err
		}
	}
	return &msg, stream.Err()
}

// run is the program with its surroundings passed in, so tests can run it
// against a fake provider; opts are added to the transport's options. It
// returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, opts ...retryhttp.Option) int {
	key := getenv("ANTHROPIC_API_KEY")
	if key == "" {
		fmt.Fprintln(stderr, "anthropic: ANTHROPIC_API_KEY is not set, so there is nothing to send.\n"+
			"Set it (and optionally ANTHROPIC_BASE_URL and ANTHROPIC_MODEL) to send one message through retryhttp.")
		return 0
	}
	prompt := strings.Join(args, " ")
	if prompt == "" {
		prompt = defaultPrompt
	}
	model := getenv("ANTHROPIC_MODEL")
	if model == "" {
		model = defaultModel
	}

	// Info level shows each retry and why it happened.
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts = append([]retryhttp.Option{retryhttp.WithLogger(logger)}, opts...)
	client := newClient(getenv("ANTHROPIC_BASE_URL"), key, opts...)

	msg, err := ask(ctx, client, model, prompt)
	if err != nil {
		// A response that ended retrying (a 400, or a 529 after the last
		// retry) reaches the caller as the SDK's own error.
		var apiErr *anthropic.Error
		if errors.As(err, &apiErr) {
			fmt.Fprintf(stderr, "anthropic: the API answered %d (%s): %s\n", apiErr.StatusCode, apiErr.Type(), apiErr.Message)
		} else {
			fmt.Fprintln(stderr, "anthropic:", err)
		}
		return 1
	}
	for _, block := range msg.Content {
		if block.Type == "text" {
			fmt.Fprintln(stdout, block.Text)
		}
	}
	return 0
}
