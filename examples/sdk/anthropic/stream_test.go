package main

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/retryhttp/retryhttp/examples/sdk/internal/sdktest"
	"github.com/retryhttp/retryhttp/retrytest"
)

// Anthropic can answer 200 text/event-stream and then send, as the first
// event, "event: error" with an overloaded_error (anthropics/anthropic-sdk-go
// issue 200). retryhttp reads that first event before handing the stream
// over, so it retries the attempt as the 529 it stands for: the SDK reads
// one clean stream and never sees the failed one.
func TestStreamOpeningWithOverloadIsRetried(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: retrytest.MustParseScript("stream:overloaded_error, stream")})

	msg, err := askStream(context.Background(), testClient(srv, clk), testModel, "hello")

	if err != nil {
		t.Fatalf("the SDK's stream failed: %v", err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "ok" || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("the SDK gathered %+v, want one text block \"ok\" ending the turn", msg)
	}
	st := srv.Stats()
	if st.Attempts != 2 {
		t.Errorf("the provider saw %d attempts, want 2", st.Attempts)
	}
	sdktest.SDKCall(t, st, 200, 200) // both streams were 200s; the first opened with the error
	sdktest.SameBody(t, st, 0)
	if got, want := clk.Sleeps(), []time.Duration{time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("waits %v, want %v (one backoff)", got, want)
	}
}

// Once a stream's first event has reached the SDK, an error later in it is
// not retried: it reaches the SDK as its own *anthropic.Error, from the
// stream, after exactly one attempt, with the events before it delivered.
func TestStreamFailingAfterItsFirstEventIsTheSDKsError(t *testing.T) {
	clk := sdktest.NewClock(sdktest.Start)
	srv := sdktest.Provider(t, clk, retrytest.Anthropic, retrytest.Config{Script: []retrytest.Step{
		{Stream: &retrytest.Stream{ErrorType: "overloaded_error", ErrorAfter: 3}}, // after message_start, content_block_start, ping
		{Stream: &retrytest.Stream{}}, // what a retry would get
	}})

	msg, err := askStream(context.Background(), testClient(srv, clk), testModel, "hello")

	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %#v, want an *anthropic.Error", err)
	}
	if apiErr.Type() != "overloaded_error" {
		t.Errorf("the SDK error is %q, want overloaded_error", apiErr.Type())
	}
	if msg.ID != "msg_retrytest_1" {
		t.Errorf("the SDK gathered message %q before the error, want msg_retrytest_1 (the events before the error)", msg.ID)
	}
	st := srv.Stats()
	if st.Attempts != 1 {
		t.Errorf("the provider saw %d attempts, want exactly 1", st.Attempts)
	}
	sdktest.SDKCall(t, st, 200)
}
