package otelretry_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/retryhttp/retryhttp"
	"github.com/retryhttp/retryhttp/otelretry"
	"github.com/retryhttp/retryhttp/retrytest"
)

// Traces to stdout: a 503 then a 200 give a logical span with a backoff
// wait and two client spans, the second a resend. The IDs come from a
// counter and the timestamps are left out, so the output is the same on
// every run; a real program uses the SDK's defaults and an OTLP exporter.
func Example_stdout() {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout), stdouttrace.WithoutTimestamps())
	if err != nil {
		panic(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(&counterIDs{}),
		sdktrace.WithResource(resource.Empty()))
	defer tp.Shutdown(context.Background())

	provider := retrytest.NewTransport(retrytest.Config{Script: retrytest.MustParseScript("503, 200")})
	t := otelretry.New(provider,
		otelretry.WithTracerProvider(tp),
		otelretry.WithPropagators(propagation.TraceContext{}),
		otelretry.WithRetryOptions(retryhttp.WithClock(retrytest.NewClock()), retryhttp.WithJitter(0)),
	)
	defer t.Close()

	resp, err := (&http.Client{Transport: t}).Get("https://api.example.com/v1/models")
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Output:
	// {"Name":"GET","SpanContext":{"TraceID":"00000000000000000000000000000001","SpanID":"0000000000000002","TraceFlags":"01","TraceState":"","Remote":false},"Parent":{"TraceID":"00000000000000000000000000000001","SpanID":"0000000000000001","TraceFlags":"01","TraceState":"","Remote":false},"SpanKind":3,"StartTime":"0001-01-01T00:00:00Z","EndTime":"0001-01-01T00:00:00Z","Attributes":[{"Key":"http.request.method","Value":{"Type":"STRING","Value":"GET"}},{"Key":"url.full","Value":{"Type":"STRING","Value":"https://api.example.com/v1/models"}},{"Key":"server.address","Value":{"Type":"STRING","Value":"api.example.com"}},{"Key":"network.protocol.version","Value":{"Type":"STRING","Value":"1.1"}},{"Key":"http.response.status_code","Value":{"Type":"INT64","Value":503}},{"Key":"error.type","Value":{"Type":"STRING","Value":"503"}}],"Events":null,"Links":null,"Status":{"Code":"Error","Description":""},"DroppedAttributes":0,"DroppedEvents":0,"DroppedLinks":0,"ChildSpanCount":0,"Resource":null,"InstrumentationScope":{"Name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","Version":"0.72.0","SchemaURL":"","Attributes":null},"InstrumentationLibrary":{"Name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","Version":"0.72.0","SchemaURL":"","Attributes":null}}
	// {"Name":"retryhttp GET","SpanContext":{"TraceID":"00000000000000000000000000000001","SpanID":"0000000000000001","TraceFlags":"01","TraceState":"","Remote":false},"Parent":{"TraceID":"00000000000000000000000000000000","SpanID":"0000000000000000","TraceFlags":"00","TraceState":"","Remote":false},"SpanKind":1,"StartTime":"0001-01-01T00:00:00Z","EndTime":"0001-01-01T00:00:00Z","Attributes":[{"Key":"http.request.method","Value":{"Type":"STRING","Value":"GET"}},{"Key":"server.address","Value":{"Type":"STRING","Value":"api.example.com"}},{"Key":"retryhttp.verdict","Value":{"Type":"STRING","Value":"success"}},{"Key":"retryhttp.attempts","Value":{"Type":"INT64","Value":2}},{"Key":"retryhttp.upstream","Value":{"Type":"STRING","Value":"https://api.example.com"}},{"Key":"url.full","Value":{"Type":"STRING","Value":"https://api.example.com/v1/models"}},{"Key":"http.response.status_code","Value":{"Type":"INT64","Value":200}}],"Events":[{"Name":"retryhttp.wait","Attributes":[{"Key":"retryhttp.wait.kind","Value":{"Type":"STRING","Value":"backoff"}},{"Key":"retryhttp.wait.duration","Value":{"Type":"FLOAT64","Value":1}},{"Key":"retryhttp.attempt","Value":{"Type":"INT64","Value":2}},{"Key":"retryhttp.wait.reason","Value":{"Type":"STRING","Value":"503 Service Unavailable"}}],"DroppedAttributeCount":0,"Time":"0001-01-01T00:00:00Z"}],"Links":null,"Status":{"Code":"Unset","Description":""},"DroppedAttributes":0,"DroppedEvents":0,"DroppedLinks":0,"ChildSpanCount":2,"Resource":null,"InstrumentationScope":{"Name":"github.com/retryhttp/retryhttp/otelretry","Version":"0.1.0","SchemaURL":"","Attributes":null},"InstrumentationLibrary":{"Name":"github.com/retryhttp/retryhttp/otelretry","Version":"0.1.0","SchemaURL":"","Attributes":null}}
	// {"Name":"GET","SpanContext":{"TraceID":"00000000000000000000000000000001","SpanID":"0000000000000003","TraceFlags":"01","TraceState":"","Remote":false},"Parent":{"TraceID":"00000000000000000000000000000001","SpanID":"0000000000000001","TraceFlags":"01","TraceState":"","Remote":false},"SpanKind":3,"StartTime":"0001-01-01T00:00:00Z","EndTime":"0001-01-01T00:00:00Z","Attributes":[{"Key":"http.request.method","Value":{"Type":"STRING","Value":"GET"}},{"Key":"url.full","Value":{"Type":"STRING","Value":"https://api.example.com/v1/models"}},{"Key":"server.address","Value":{"Type":"STRING","Value":"api.example.com"}},{"Key":"network.protocol.version","Value":{"Type":"STRING","Value":"1.1"}},{"Key":"http.request.resend_count","Value":{"Type":"INT64","Value":1}},{"Key":"http.response.status_code","Value":{"Type":"INT64","Value":200}}],"Events":null,"Links":null,"Status":{"Code":"Unset","Description":""},"DroppedAttributes":0,"DroppedEvents":0,"DroppedLinks":0,"ChildSpanCount":0,"Resource":null,"InstrumentationScope":{"Name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","Version":"0.72.0","SchemaURL":"","Attributes":null},"InstrumentationLibrary":{"Name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","Version":"0.72.0","SchemaURL":"","Attributes":null}}
}

// counterIDs numbers traces and spans from 1.
type counterIDs struct {
	mu sync.Mutex
	n  uint64
}

func (g *counterIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[8:], 1)
	return tid, g.NewSpanID(ctx, tid)
}

func (g *counterIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], g.n)
	return sid
}

// Metrics for Prometheus, through the OpenTelemetry Prometheus exporter:
// a 503, 503, 200 and then a 404. A program serves the registry with
// promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) on /metrics; here the
// counters and the breaker's state are printed (the histograms' timings
// differ from run to run).
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())

	provider := retrytest.NewTransport(retrytest.Config{Script: retrytest.MustParseScript("503, 503, 200, 404")})
	t := otelretry.New(provider,
		otelretry.WithMeterProvider(mp),
		otelretry.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelretry.WithRetryOptions(retryhttp.WithClock(retrytest.NewClock())),
	)
	defer t.Close()
	client := &http.Client{Transport: t}
	for _, path := range []string{"/v1/models", "/v1/missing"} {
		resp, err := client.Get("https://api.example.com" + path)
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	var text strings.Builder
	for _, f := range families {
		expfmt.MetricFamilyToText(&text, f)
	}
	for _, line := range strings.Split(text.String(), "\n") {
		for _, name := range []string{"retryhttp_attempts_total", "retryhttp_breaker_status", "http_client_request_duration_seconds_count", "retryhttp_request_duration_seconds_count"} {
			if strings.HasPrefix(line, name+"{") {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// http_client_request_duration_seconds_count{http_request_method="GET",http_response_status_code="200",network_protocol_name="http",network_protocol_version="1.1",retryhttp_upstream="https://api.example.com",server_address="api.example.com",url_scheme="https"} 1
	// http_client_request_duration_seconds_count{http_request_method="GET",http_response_status_code="404",network_protocol_name="http",network_protocol_version="1.1",retryhttp_upstream="https://api.example.com",server_address="api.example.com",url_scheme="https"} 1
	// http_client_request_duration_seconds_count{http_request_method="GET",http_response_status_code="503",network_protocol_name="http",network_protocol_version="1.1",retryhttp_upstream="https://api.example.com",server_address="api.example.com",url_scheme="https"} 2
	// retryhttp_attempts_total{http_request_method="GET",retryhttp_outcome="final",retryhttp_reason="client_error",retryhttp_upstream="https://api.example.com"} 1
	// retryhttp_attempts_total{http_request_method="GET",retryhttp_outcome="success",retryhttp_reason="ok",retryhttp_upstream="https://api.example.com"} 1
	// retryhttp_attempts_total{http_request_method="GET",retryhttp_outcome="transient",retryhttp_reason="overloaded",retryhttp_upstream="https://api.example.com"} 2
	// retryhttp_breaker_status{retryhttp_breaker_state="closed",retryhttp_upstream="https://api.example.com"} 1
	// retryhttp_breaker_status{retryhttp_breaker_state="half_open",retryhttp_upstream="https://api.example.com"} 0
	// retryhttp_breaker_status{retryhttp_breaker_state="open",retryhttp_upstream="https://api.example.com"} 0
	// retryhttp_request_duration_seconds_count{http_request_method="GET",retryhttp_upstream="https://api.example.com",retryhttp_verdict="failure"} 1
	// retryhttp_request_duration_seconds_count{http_request_method="GET",retryhttp_upstream="https://api.example.com",retryhttp_verdict="success"} 1
}
