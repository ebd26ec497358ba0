// The overhead of the instrumentation on the happy path (one attempt, a 200),
// against a stub base transport as bench/overhead_test.go uses, so that what
// is measured is the wrappers' cost and not the network's. Run with
//
//	cd otelretry && go test -run '^$' -bench Overhead -benchmem -count 6 . | tee /tmp/otel.txt
//	benchstat -col /impl /tmp/otel.txt

package otelretry

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/retryhttp/retryhttp"
)

const benchBody = `{"ok":true}`

// stub answers 200 with a small body, reading and closing the request body
// as a real transport does.
type stub struct{}

func (stub) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		Status: "200 OK", StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(benchBody)),
		ContentLength: int64(len(benchBody)),
		Request:       req,
	}, nil
}

// sdkProviders are the SDK's providers as a service would run them, minus
// the network: every span sampled and handed to an exporter that drops it,
// every measurement aggregated for a reader that is never read.
func sdkProviders(b *testing.B) (trace.TracerProvider, metric.MeterProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	return tp, mp
}

func BenchmarkOverhead(b *testing.B) {
	tp, mp := sdkProviders(b)
	prop := propagation.TraceContext{}
	contenders := []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"bare", func() http.RoundTripper { return stub{} }},
		{"retryhttp", func() http.RoundTripper { return retryhttp.New(stub{}) }},
		{"otelhttp", func() http.RoundTripper { // otelhttp alone, no retries: for reference
			return otelhttp.NewTransport(stub{}, otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp), otelhttp.WithPropagators(prop))
		}},
		{"otelretry-noop", func() http.RoundTripper { // the API's no-op providers: the wrappers' own cost
			return New(stub{}, WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(metricnoop.NewMeterProvider()), WithPropagators(prop))
		}},
		{"otelretry-sdk", func() http.RoundTripper {
			return New(stub{}, WithTracerProvider(tp), WithMeterProvider(mp), WithPropagators(prop))
		}},
	}
	for _, c := range contenders {
		b.Run("impl="+c.name, func(b *testing.B) {
			rt := c.rt()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodGet, "https://api.test/v1/models", nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
