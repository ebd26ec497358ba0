// Package retrytest is a fake API provider for testing HTTP clients that
// retry: it pushes back the way real APIs do, so a test can check that a
// client waits, retries and gives up as it should.
//
// It comes in two forms with the same behaviour and the same [Stats]:
//
//   - [NewServer] starts an [httptest.Server] on 127.0.0.1. Network faults are
//     real: a reset is a TCP RST, a truncated body is a closed connection.
//   - [NewTransport] returns an [http.RoundTripper] that answers in-process, for
//     httpmock-style tests that need no socket. Network faults become the
//     errors net/http would return: a *net.OpError wrapping
//     syscall.ECONNRESET, a body that fails with io.ErrUnexpectedEOF.
//
// The zero [Config] is a provider that answers every request 200. Each field
// adds one kind of trouble:
//
//   - [Family] picks the provider whose headers and JSON bodies are imitated:
//     [OpenAI], [Anthropic], [GitHub], [IETF], or [Plain].
//   - [RateLimit] is a token bucket, or with a [Window] a fixed window; on
//     exhaustion the provider answers 429 (403 for GitHub) with the family's
//     rate-limit headers (Plain sends none), its real error body and a
//     Retry-After in the RetryAfter style.
//   - [Rounding] and ClockOffset make the absolute times in headers as coarse
//     and as skewed as real servers' are.
//   - Overload lists windows of time during which every request gets 503 or
//     529 (Anthropic's overloaded_error); [Capacity] sheds with 503 (or
//     529) whatever is beyond a fixed number of requests in service.
//   - [Flaky] resets connections, truncates bodies, delays headers and
//     opens streams with an overloaded error, each with a probability drawn
//     from a random source seeded with Seed.
//   - Script answers the first requests with given steps (statuses, faults,
//     delays), for example ParseScript("429@1s, 529, 200").
//   - [Stream] answers with server-sent events in the family's streaming
//     format (Anthropic's Messages events, OpenAI's Chat Completions
//     chunks), with their usage: a Script step's, or the success of any
//     request whose body says "stream": true. A stream can open with an
//     error event ("stream:overloaded_error"), fail mid-way, be cut, or
//     come slowly.
//
// # Order of decisions
//
// Each arrival is recorded (time, body hash, request id) and then answered
// by the first of these that applies:
//
//  1. the MaxAttempts fuse: 410 Gone;
//  2. the next Script step, exactly as written (nothing below applies);
//  3. a Flaky reset;
//  4. an Overload window;
//  5. the RateLimit, when its bucket is empty or its window used up;
//  6. Capacity, when every slot is taken (the request has spent its
//     rate-limit token by then, as it would at a real API's edge);
//  7. success: 200 from Config.Success or the family's small success body
//     (a stream when the request asked for one), truncated if Flaky says
//     so, a stream opened with an error event if Flaky.StreamError says so.
//
// A Flaky slow-headers delay applies to the answers of steps 4 to 7.
//
// # Time
//
// Arrival times, the bucket's refill, fixed windows, overload windows and
// dates in headers use Config.Now, so a test that injects a clock gets exact
// header values. Delays that a client experiences (slow headers, capacity
// holds, Step.Delay) are real time: they exist to be timed out by the client
// under test.
//
// Every answer carries a Date header, as a real server's does: the arrival's
// instant truncated to the second, as net/http writes it. A real server's
// clock is not the client's: Config.ClockOffset sets it apart, and the Date,
// the resets and the Retry-After dates are all written on the server's clock
// (Now()+ClockOffset), while the waits they stand for, and every relative
// value (Retry-After seconds, OpenAI's durations, the IETF t=), stay those
// of Config.Now. Absolute times are cut to whole seconds as Config.Rounding
// says: rounded up by default, so never early; truncated or rounded to the
// nearest second, as many servers do. With Config.ProxyDate the Date is
// written on the client's clock instead, as a proxy in front of the server
// writes its own: it then says nothing of the offset of the other times.
//
// # Reproducibility
//
// Three numbers are drawn from the seeded source for every arrival, in
// arrival order, whether or not they are used. Requests sent one after
// another therefore meet the same faults on every run with the same Seed;
// concurrent requests meet the same sequence of faults in whatever order
// they arrive.
package retrytest
