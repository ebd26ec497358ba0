package otelretry

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhttp/retryhttp"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/retryhttp/retryhttp/otelretry"

// Transport is a retryhttp.RetryTransport instrumented with OpenTelemetry:
// a span for each logical request, a client span for each attempt, and the
// metrics docs/observability.md lists. It is an http.RoundTripper, safe for
// concurrent use; make one with New and share it.
type Transport struct {
	rt     *retryhttp.RetryTransport
	tracer trace.Tracer
	m      *instruments
	user   retryhttp.Hooks
}

// config is what the options set.
type config struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	prop      propagation.TextMapPropagator
	retryOpts []retryhttp.Option
	hooks     retryhttp.Hooks
	httpOpts  []otelhttp.Option
}

// Option configures New.
type Option func(*config)

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider()
// at the time New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider()
// at the time New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithPropagators sets how the trace context is written into every
// attempt's headers. Default: otel.GetTextMapPropagator() (set it to
// propagation.TraceContext{} for W3C traceparent and tracestate).
func WithPropagators(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithRetryOptions passes options to the retryhttp transport underneath
// (retries, backoff, limits, breaker, clock, ...). Give your own hooks with
// WithHooks, not retryhttp.WithHooks: the transport has one set of hooks,
// and this package's are installed after these options.
func WithRetryOptions(opts ...retryhttp.Option) Option {
	return func(c *config) { c.retryOpts = append(c.retryOpts, opts...) }
}

// WithHooks adds hooks of your own; they are called after this package's,
// with the same events.
func WithHooks(h retryhttp.Hooks) Option {
	return func(c *config) { c.hooks = h }
}

// WithHTTPOptions passes options to the otelhttp.Transport that makes each
// attempt's client span (a span name formatter, filters, a client trace).
// This package sets the tracer and meter providers and the propagators.
func WithHTTPOptions(opts ...otelhttp.Option) Option {
	return func(c *config) { c.httpOpts = append(c.httpOpts, opts...) }
}

// New returns a Transport that sends through base, with retryhttp's policy
// (WithRetryOptions) and OpenTelemetry's instrumentation. A nil base gets a
// pooled transport from go-cleanhttp, as retryhttp.New(nil) does.
//
// The layers, outermost first: the logical span (this Transport); the
// retryhttp transport, whose hooks record the waits, verdicts and metrics;
// otelhttp's client span per attempt, which writes the trace context into
// the attempt's headers and records http.client.request.duration; then
// base.
func New(base http.RoundTripper, opts ...Option) *Transport {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	if base == nil {
		base = cleanhttp.DefaultPooledTransport()
	}
	t := &Transport{
		tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		user:   c.hooks,
	}
	t.m = newInstruments(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version)))
	httpOpts := append([]otelhttp.Option{
		otelhttp.WithTracerProvider(c.tp),
		otelhttp.WithMeterProvider(c.mp),
		otelhttp.WithPropagators(c.prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { m, _ := method(r.Method); return m }),
		otelhttp.WithMetricAttributesFn(upstreamOfAttempt),
	}, c.httpOpts...)
	attempt := &attemptTransport{next: otelhttp.NewTransport(&annotateTransport{next: base}, httpOpts...)}
	retryOpts := append(c.retryOpts[:len(c.retryOpts):len(c.retryOpts)], retryhttp.WithHooks(t.hooks()))
	t.rt = retryhttp.New(attempt, retryOpts...)
	t.m.observe(t.rt)
	return t
}

// Retry returns the retryhttp transport underneath, for its Stats. Requests
// sent through it directly have their attempts traced and counted, but no
// logical span.
func (t *Transport) Retry() *retryhttp.RetryTransport { return t.rt }

// Stats returns the retryhttp transport's Stats.
func (t *Transport) Stats() []retryhttp.Stats { return t.rt.Stats() }

// CloseIdleConnections closes the base transport's idle connections.
func (t *Transport) CloseIdleConnections() { t.rt.CloseIdleConnections() }

// Close stops reporting this transport's gauges (the callback that reads
// Stats is unregistered). The transport still works; call Close when you
// drop a Transport whose meter provider lives on.
func (t *Transport) Close() error { return t.m.close() }

// call is what this package tracks of one logical request. It goes in the
// request's context, where the hooks and the attempt layers find it; they
// all run on the request's goroutine, one at a time, so it needs no lock.
type call struct {
	span     trace.Span
	start    time.Time // wall time, for span events
	method   string
	key      string
	url      string // redacted, from the first event
	attempt  int    // the attempt being sent
	stop     error  // OnGiveUp's stop reason
	stopText string
	noBody   bool // the attempt's base response had http.NoBody

	// Room for attributes, so that most requests need no slices of their
	// own: the logical span's (at its start, then at its end: the SDK
	// copies them), an attempt span's, and the upstream for otelhttp's
	// metric.
	attrs  [8]attribute.KeyValue
	annot  [2]attribute.KeyValue
	upAttr [1]attribute.KeyValue
}

type callKey struct{}

var internalKind = trace.WithSpanKind(trace.SpanKindInternal)

// spanName names the logical span: "retryhttp GET".
func spanName(method string) string {
	switch method {
	case http.MethodGet:
		return "retryhttp GET"
	case http.MethodPost:
		return "retryhttp POST"
	}
	return "retryhttp " + method
}

func callOf(ctx context.Context) *call {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// RoundTrip sends req with retries, in a span for the logical request
// (kind internal, named "retryhttp" and the method) whose children are the
// attempts' client spans. The span ends when RoundTrip returns; the last
// attempt's client span ends when its body is read or closed.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	m, known := method(req.Method)
	c := &call{start: time.Now(), method: m}
	attrs := append(c.attrs[:0], methodKey.String(m))
	if !known {
		attrs = append(attrs, methodOrigKey.String(req.Method))
	}
	if req.URL != nil {
		attrs = appendServer(attrs, req.URL)
	}
	ctx, span := t.tracer.Start(req.Context(), spanName(m), internalKind, trace.WithAttributes(attrs...))
	c.span = span
	ctx = context.WithValue(ctx, callKey{}, c)
	sent := req.WithContext(ctx)
	resp, err := t.rt.RoundTrip(sent)
	if resp != nil && resp.Request == sent {
		resp.Request = req // the caller's own, as without instrumentation
	}
	t.end(ctx, c, req, resp, err)
	return resp, err
}

// end closes the logical span with the request's verdict, and records its
// duration.
func (t *Transport) end(ctx context.Context, c *call, req *http.Request, resp *http.Response, err error) {
	verdict, errType := verdictSuccess, ""
	status, attempts := 0, c.attempt
	var e *retryhttp.Error // only on errors: errors.As makes it escape
	switch {
	case err != nil:
		e = asError(err)
		errType = errorReason(err)
		verdict = verdictFailure
		if e != nil {
			attempts = e.Attempts
			if c.url == "" {
				c.url = e.URL
			}
		}
		switch {
		case c.stop != nil:
			verdict = verdictGaveUp
		case req.Context().Err() != nil:
			verdict = verdictCanceled // the caller's context ended
		}
	default:
		status = resp.StatusCode
		if n := retryhttp.Attempts(resp); n > 0 {
			attempts = n
		}
		switch {
		case c.stop != nil:
			verdict = verdictGaveUp
		case status >= 400:
			verdict = verdictFailure
		}
		if status >= 400 {
			errType = strconv.Itoa(status)
		}
	}
	span := c.span
	if span.IsRecording() {
		attrs := append(c.attrs[:0], VerdictKey.String(verdict), AttemptsKey.Int(attempts))
		if c.key != "" {
			attrs = append(attrs, UpstreamKey.String(c.key))
		}
		if c.url != "" {
			attrs = append(attrs, urlFullKey.String(c.url))
		} else if req.URL != nil {
			attrs = append(attrs, urlFullKey.String(redactURL(req.URL)))
		}
		if status != 0 {
			attrs = append(attrs, statusKey.Int(status))
		}
		if c.stop != nil {
			attrs = append(attrs, StopReasonKey.String(stopReason(c.stop)))
		}
		if errType != "" {
			attrs = append(attrs, errorTypeKey.String(errType))
		}
		span.SetAttributes(attrs...)
		if verdict != verdictSuccess {
			desc := c.stopText
			if desc == "" && e != nil {
				desc = e.Error()
			}
			span.SetStatus(codes.Error, desc)
		}
	}
	span.End()
	t.m.request(ctx, c, verdict, time.Since(c.start))
}

// asError returns the *retryhttp.Error in err's chain, or nil.
func asError(err error) *retryhttp.Error {
	var e *retryhttp.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// appendServer adds server.address, and server.port when it is not the
// scheme's default, as otelhttp does on the attempts' spans.
func appendServer(attrs []attribute.KeyValue, u *url.URL) []attribute.KeyValue {
	host := u.Hostname()
	if host == "" {
		return attrs
	}
	attrs = append(attrs, serverAddrKey.String(host))
	port := u.Port()
	if port == "" {
		return attrs
	}
	p, err := strconv.Atoi(port)
	if err == nil && p > 0 && !(u.Scheme == "https" && p == 443) && !(u.Scheme == "http" && p == 80) {
		attrs = append(attrs, serverPortKey.Int(p))
	}
	return attrs
}

// redactURL is a URL for a span when retryhttp has given none (requests
// sent through Retry() directly): no user information, and every query
// value replaced, since there is no telling which of them are secrets.
func redactURL(u *url.URL) string {
	v := *u
	v.User = nil
	if v.RawQuery != "" {
		q := v.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		v.RawQuery = q.Encode()
	}
	return v.String()
}

// attemptTransport sits between retryhttp and otelhttp. It hands back the
// request retryhttp sent (otelhttp's response points at its own copy, with
// the trace headers), and keeps a response that had no body bodiless: its
// client span ends at once, and retryhttp frees its concurrency slot at
// once, as without instrumentation.
type attemptTransport struct{ next http.RoundTripper }

func (a *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := callOf(req.Context())
	if c != nil {
		c.noBody = false
	}
	resp, err := a.next.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	resp.Request = req
	if c != nil && c.noBody {
		resp.Body.Close() // ends the client span
		resp.Body = http.NoBody
	}
	return resp, nil
}

// annotateTransport sits under otelhttp, in the attempt's client span: it
// puts retryhttp's redacted URL in url.full (otelhttp's keeps the query) and
// http.request.resend_count on resends.
type annotateTransport struct{ next http.RoundTripper }

func (a *annotateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	span := trace.SpanFromContext(req.Context())
	c := callOf(req.Context())
	if span.IsRecording() {
		var attrs []attribute.KeyValue
		if c != nil {
			attrs = c.annot[:0]
		}
		switch {
		case c != nil && c.url != "":
			attrs = append(attrs, urlFullKey.String(c.url))
		case req.URL != nil:
			attrs = append(attrs, urlFullKey.String(redactURL(req.URL)))
		}
		if c != nil && c.attempt > 1 {
			attrs = append(attrs, resendCountKey.Int(c.attempt-1))
		}
		span.SetAttributes(attrs...)
	}
	resp, err := a.next.RoundTrip(req)
	if c != nil && err == nil && resp != nil && resp.Body == http.NoBody {
		c.noBody = true
	}
	return resp, err
}

// upstreamOfAttempt adds the upstream to http.client.request.duration.
func upstreamOfAttempt(req *http.Request) []attribute.KeyValue {
	c := callOf(req.Context())
	if c == nil || c.key == "" {
		return nil
	}
	if c.upAttr[0].Value.AsString() != c.key {
		c.upAttr[0] = UpstreamKey.String(c.key)
	}
	return c.upAttr[:]
}

// Version is this module's version, reported as the instrumentation scope's.
const Version = "0.1.0"
