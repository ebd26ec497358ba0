package otelretry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/retrytest"
)

// harness is a Transport wired to in-memory exporters, against a loopback
// server, on a clock whose waits pass at once.
type harness struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	rt     *Transport
	srv    *httptest.Server
	clock  *retrytest.Clock

	mu      sync.Mutex
	parents []string // the traceparent header of every request the server saw
}

// newHarness starts a server answering with handler and a Transport to it.
func newHarness(t *testing.T, handler http.HandlerFunc, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), clock: retrytest.NewClock()}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.parents = append(h.parents, r.Header.Get("Traceparent"))
		h.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(h.srv.Close)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	all := append([]Option{
		WithTracerProvider(tp), WithMeterProvider(mp), WithPropagators(propagation.TraceContext{}),
		WithRetryOptions(retryhttp.WithClock(h.clock), retryhttp.WithJitter(0)),
	}, opts...)
	h.rt = New(h.srv.Client().Transport, all...)
	t.Cleanup(func() { h.rt.Close() })
	return h
}

// get sends a GET to path through the transport and reads the answer.
func (h *harness) get(ctx context.Context, path string) (*http.Response, error) {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+path, nil)
	require.NoError(h.t, err)
	resp, err := (&http.Client{Transport: h.rt}).Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func (h *harness) traceparents() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.parents...)
}

// upstream is the server's key as Stats names it.
func (h *harness) upstream() string { return h.srv.URL }

// ended returns the ended spans by name.
func (h *harness) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// collect reads every metric.
func (h *harness) collect() map[string]metricdata.Metrics {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(h.t, h.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point, flattened: its attributes and its value (a sum
// or gauge value, or a histogram's count, with its sum).
type point struct {
	attrs map[string]string
	value float64
	sum   float64
}

func points(m metricdata.Metrics) []point {
	var out []point
	flat := func(s attribute.Set) map[string]string {
		a := map[string]string{}
		for _, kv := range s.ToSlice() {
			a[string(kv.Key)] = kv.Value.Emit()
		}
		return a
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{flat(p.Attributes), float64(p.Value), 0})
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{flat(p.Attributes), p.Value, 0})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{flat(p.Attributes), float64(p.Value), 0})
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{flat(p.Attributes), p.Value, 0})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{flat(p.Attributes), float64(p.Count), p.Sum})
		}
	}
	return out
}

// value sums the points of m whose attributes include want.
func value(m metricdata.Metrics, want map[string]string) float64 {
	total := 0.0
	for _, p := range points(m) {
		if matches(p.attrs, want) {
			total += p.value
		}
	}
	return total
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// attrs flattens a span's attributes.
func attrs(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// waits returns the span's wait events' attributes.
func waits(s sdktrace.ReadOnlySpan) []map[string]string {
	var out []map[string]string
	for _, e := range s.Events() {
		if e.Name == WaitEventName {
			out = append(out, attrs(e.Attributes))
		}
	}
	return out
}

// statuses answers with the given statuses in order, then the last one;
// header, when set, is called to add headers to the i-th answer.
func statuses(codes []int, header func(i int, h http.Header)) http.HandlerFunc {
	var mu sync.Mutex
	i := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := i
		i++
		mu.Unlock()
		if header != nil {
			header(n, w.Header())
		}
		w.WriteHeader(codes[min(n, len(codes)-1)])
		io.WriteString(w, "body")
	}
}

func spanID(s sdktrace.ReadOnlySpan) trace.SpanID { return s.SpanContext().SpanID() }
