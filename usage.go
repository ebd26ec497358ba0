package retryhttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// Token accounting as the providers do it. Anthropic counts a request's
// output tokens against its output-token limit from max_tokens when the
// request starts, and corrects the count when it ends; input tokens are
// counted as the request is read. The client-side limits of WithRateLimit
// do the same: an attempt books its estimate (input from the body, output
// from max_tokens or its aliases) when it is admitted, and the usage the
// response reports settles the booking: tokens booked but not used go back
// to the local buckets at once, tokens used beyond the booking are charged.
// Tokens given back pay the debt the queued requests wait behind, so each
// of them comes sooner by what the tokens are worth, and is woken to see it
// (clientLimits.adjust; the queue is the buckets' debt, see bucket).
//
// The usage is read as the caller reads the body, from the bytes that pass,
// with nothing buffered but the usage object itself:
//
//   - a JSON body's top-level "usage" (Anthropic input_tokens,
//     cache_creation_input_tokens and output_tokens; OpenAI prompt_tokens
//     and completion_tokens, or the Responses API's input_tokens and
//     output_tokens) or "usageMetadata" (Gemini promptTokenCount,
//     candidatesTokenCount and thoughtsTokenCount);
//   - a stream's events: Anthropic's message_start (message.usage: the
//     input) and message_delta (usage: the output so far, cumulative);
//     OpenAI's final chunk (usage, sent when the request sets
//     stream_options.include_usage); the Responses API's response.completed
//     (response.usage); Gemini's chunks (usageMetadata).
//
// Anthropic's cache reads (cache_read_input_tokens) are not counted as
// input: they do not count against its input-token limit for most models.
// A response whose body is never read, or that reports no usage, keeps its
// booking as estimated.

// tokenUsage is what a usage object reports; a count that is absent is not
// settled.
type tokenUsage struct {
	in, out       int
	hasIn, hasOut bool
}

// parseUsage reads a usage object. inputOnly is set for Anthropic's
// message_start, whose output count is a placeholder until message_delta.
func parseUsage(raw []byte, gemini, inputOnly bool) tokenUsage {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return tokenUsage{}
	}
	var u tokenUsage
	sum := func(keys ...string) (int, bool) {
		total, found := 0, false
		for _, k := range keys {
			if n, ok := countValue(m[k]); ok {
				total, found = min(total+n, maxTokenCount), true
			}
		}
		return total, found
	}
	switch {
	case gemini:
		u.in, u.hasIn = sum("promptTokenCount")
		u.out, u.hasOut = sum("candidatesTokenCount", "thoughtsTokenCount")
	default:
		if u.in, u.hasIn = sum("prompt_tokens"); !u.hasIn {
			u.in, u.hasIn = sum("input_tokens", "cache_creation_input_tokens")
		}
		if u.out, u.hasOut = sum("completion_tokens"); !u.hasOut {
			u.out, u.hasOut = sum("output_tokens")
		}
	}
	if inputOnly {
		u.out, u.hasOut = 0, false
	}
	return u
}

// settlement is an attempt's booking on the client-side token limits, to be
// settled by the usage its response reports: on the local buckets, or on a
// QuotaBackend that is a QuotaSettler.
type settlement struct {
	limits  *clientLimits     // a local booking
	shared  *sharedSettlement // or a booking on the backend
	clock   Clock
	in, out int // the tokens booked now
}

// sharedSettlement is where a booking on the backend is settled.
type sharedSettlement struct {
	q       *sharedQuota
	settler QuotaSettler
	key     string
	cfg     *config
}

// newSettlement is the settlement of an attempt admitted on u with a
// booking of the client-side limits (local: on this process's buckets, else
// on the backend, if any), or nil when there is nothing to settle: no token
// limits, or a backend that cannot settle.
func (c *call) newSettlement(u *upstream, local bool) *settlement {
	if u.limits == nil || !u.limits.countsTokens() {
		return nil
	}
	s := &settlement{clock: c.t.cfg.clock}
	if local {
		s.limits = u.limits
	} else {
		q := c.t.cfg.quota
		if q == nil {
			return nil
		}
		settler, ok := q.backend.(QuotaSettler)
		if !ok {
			return nil
		}
		s.shared = &sharedSettlement{q: q, settler: settler, key: c.key.String(), cfg: &c.t.cfg}
	}
	s.in, s.out = c.tokens() // estimated already, when the booking was made
	return s
}

// send settles a booking on the backend by dIn and dOut tokens, in the
// background.
func (s *sharedSettlement) send(now time.Time, dIn, dOut int) {
	deltas := s.cfg.quotaDeltas(dIn, dOut)
	if len(deltas) == 0 || s.q.down.Load() {
		return
	}
	go s.q.call(context.Background(), s.cfg.quotaTimeout, func(ctx context.Context) (time.Duration, error) {
		return 0, s.settler.Settle(ctx, s.key, deltas, now)
	})
}

// settle makes the booking what u reports.
func (s *settlement) settle(u tokenUsage) {
	var dIn, dOut int
	if u.hasIn {
		dIn, s.in = u.in-s.in, u.in
	}
	if u.hasOut {
		dOut, s.out = u.out-s.out, u.out
	}
	switch {
	case dIn == 0 && dOut == 0:
	case s.shared != nil:
		s.shared.send(s.clock.Now(), dIn, dOut)
	default:
		s.limits.adjust(s.clock.Now(), dIn, dOut)
	}
}

// usageMeter is the body of a response whose usage settles its attempt's
// booking: it passes every byte on as it is read, and reads the usage on
// the way. Its methods are called by one reader at a time (the first-event
// check's, then the caller's), as a body's are.
type usageMeter struct {
	rc     io.ReadCloser
	settle *settlement
	sse    bool        // the body is an event stream; else JSON
	parser sseParser   // the stream's events (sse)
	scan   jsonScanner // the JSON document: the body, or one event's data
}

// meterUsage wraps the body of a 2xx JSON or event-stream response so its
// usage settles s; other responses keep their body.
func meterUsage(resp *http.Response, s *settlement) {
	if resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	m := &usageMeter{rc: resp.Body, settle: s}
	switch {
	case isEventStream(resp):
		m.sse = true
	case isJSONBody(resp):
	default:
		return
	}
	m.scan.mode, m.scan.sink = scanUsage, m
	resp.Body = m
}

func (m *usageMeter) Read(p []byte) (int, error) {
	n, err := m.rc.Read(p)
	if n > 0 {
		if m.sse {
			m.parser.feed(p[:n], m)
		} else if !m.scan.done {
			m.scan.feed(p[:n])
		}
	}
	return n, err
}

func (m *usageMeter) Close() error { return m.rc.Close() }

// data and dispatch take the stream's events (sseSink): each event's data
// is a JSON document of its own.
func (m *usageMeter) data(p []byte) {
	if !m.scan.done {
		m.scan.feed(p)
	}
}

func (m *usageMeter) dispatch([]byte) bool {
	m.scan.reset()
	return true
}

// value takes a usage object the scanner found (jsonValueSink).
func (m *usageMeter) value(k1, k2 jsonKey, raw []byte) {
	m.settle.settle(parseUsage(raw, k1 == keyUsageMetadata, k1 == keyMessage))
}

// adjust changes the tokens booked on the buckets by dIn input and dOut
// output tokens: a negative count gives tokens back at once, a positive one
// is charged now, as debt the next requests wait behind. Tokens given back
// pay the debt the waiting requests are queued behind: each of them comes
// sooner by what the tokens are worth, and they are woken to see it.
func (cl *clientLimits) adjust(now time.Time, dIn, dOut int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	refunded := false
	for _, d := range dimensions {
		b := cl.buckets[d]
		if b == nil || d == Requests {
			continue
		}
		n := float64(d.units(dIn, dOut))
		if n > 0 {
			b.take(now, n)
			continue
		}
		if n < 0 {
			b.advance(now)
			b.tokens = min(b.size, b.tokens-n)
			b.refunded -= n
			refunded = true
		}
	}
	if refunded && cl.refunded != nil {
		close(cl.refunded)
		cl.refunded = nil
	}
}
