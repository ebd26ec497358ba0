// Command openai sends one chat completion request to the OpenAI API with
// the official Go SDK, and lets retryhttp do the retrying underneath it.
//
//	OPENAI_API_KEY=sk-... go run ./openai "Why is the sky blue?"
//
// OPENAI_BASE_URL sends the request elsewhere (a gateway, a compatible
// server, or a retrytest server), OPENAI_MODEL picks the model. Retries are
// logged to stderr; the answer goes to stdout. Without OPENAI_API_KEY it
// says what to set and exits 0 without touching the network, so running
// every example on a machine without keys is not a failure.
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

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/retryhttp/retryhttp"
)

const (
	defaultModel  = openai.ChatModelGPT5_4Mini
	defaultPrompt = "In one sentence: why do HTTP clients retry with jitter?"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newClient returns an OpenAI client whose HTTP requests all go through
// retryhttp, configured by opts. baseURL "" keeps the SDK's production URL.
//
// The SDK still reads its other OPENAI_* variables (organization, project)
// from the environment; the URL and key given here take precedence over
// OPENAI_BASE_URL and OPENAI_API_KEY.
func newClient(baseURL, apiKey string, opts ...retryhttp.Option) openai.Client {
	httpClient := &http.Client{Transport: retryhttp.New(nil, opts...)}
	sdkOpts := []option.RequestOption{
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
	return openai.NewClient(sdkOpts...)
}

// ask sends prompt as a one-message conversation.
func ask(ctx context.Context, client openai.Client, model, prompt string) (*openai.ChatCompletion, error) {
	return client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
}

// askStream sends prompt as a one-message conversation and reads the answer
// as a stream, gathering its chunks. retryhttp retries a stream that opens
// with an error chunk (server_error, rate_limit_exceeded) before any byte
// of it reaches the SDK; an error later in the stream is not retried (part
// of the answer has been read) and comes back here from stream.Err as the
// SDK's own *ssestream.StreamError, with what was gathered so far.
// includeUsage asks for the final usage chunk.
func askStream(ctx context.Context, client openai.Client, model, prompt string, includeUsage bool) (*openai.ChatCompletionAccumulator, error) {
	params := openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
	if includeUsage {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	defer stream.Close()
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	return &acc, stream.Err()
}

// run is the program with its surroundings passed in, so tests can run it
// against a fake provider; opts are added to the transport's options. It
// returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, opts ...retryhttp.Option) int {
	key := getenv("OPENAI_API_KEY")
	if key == "" {
		fmt.Fprintln(stderr, "openai: OPENAI_API_KEY is not set, so there is nothing to send.\n"+
			"Set it (and optionally OPENAI_BASE_URL and OPENAI_MODEL) to send one request through retryhttp.")
		return 0
	}
	prompt := strings.Join(args, " ")
	if prompt == "" {
		prompt = defaultPrompt
	}
	model := getenv("OPENAI_MODEL")
	if model == "" {
		model = defaultModel
	}

	// Info level shows each retry and why it happened.
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts = append([]retryhttp.Option{retryhttp.WithLogger(logger)}, opts...)
	client := newClient(getenv("OPENAI_BASE_URL"), key, opts...)

	completion, err := ask(ctx, client, model, prompt)
	if err != nil {
		// A response that ended retrying (a 400, an insufficient_quota
		// 429, or a 5xx after the last retry) reaches the caller as the
		// SDK's own error.
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			fmt.Fprintf(stderr, "openai: the API answered %d (%s): %s\n", apiErr.StatusCode, apiErr.Type, apiErr.Message)
		} else {
			fmt.Fprintln(stderr, "openai:", err)
		}
		return 1
	}
	for _, choice := range completion.Choices {
		fmt.Fprintln(stdout, choice.Message.Content)
	}
	return 0
}
