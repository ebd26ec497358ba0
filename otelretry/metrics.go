package otelretry

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/retryhttp/retryhttp"
)

// Metric names. http.client.request.duration, per attempt, comes from
// otelhttp under the same meter provider.
const (
	MetricAttempts          = "retryhttp.attempts"
	MetricRetryDelay        = "retryhttp.retry.delay"
	MetricQueueDuration     = "retryhttp.queue.duration"
	MetricGivenUp           = "retryhttp.requests.given_up"
	MetricRequestDuration   = "retryhttp.request.duration"
	MetricBreakerTransition = "retryhttp.breaker.transitions"
	MetricBreakerStatus     = "retryhttp.breaker.status"
	MetricQueued            = "retryhttp.requests.queued"
	MetricInFlight          = "retryhttp.requests.in_flight"
	MetricConcurrencyLimit  = "retryhttp.concurrency.limit"
	MetricPaceRate          = "retryhttp.pace.rate"
	MetricRateLimitLeft     = "retryhttp.ratelimit.remaining"
	MetricRateLimitLimit    = "retryhttp.ratelimit.limit"
	MetricHoldRemaining     = "retryhttp.hold.remaining"
	MetricBudgetLeft        = "retryhttp.retry_budget.remaining"
)

// instruments are the metric instruments of one Transport.
type instruments struct {
	attempts    metric.Int64Counter
	retryDelay  metric.Float64Histogram
	queue       metric.Float64Histogram
	givenUp     metric.Int64Counter
	requestDur  metric.Float64Histogram
	transitions metric.Int64Counter

	breakerStatus metric.Int64ObservableGauge
	queued        metric.Int64ObservableUpDownCounter
	inFlight      metric.Int64ObservableUpDownCounter // nil unless Stats has the field
	concLimit     metric.Int64ObservableGauge         // nil unless Stats has the field
	pace          metric.Float64ObservableGauge
	rlRemaining   metric.Int64ObservableGauge
	rlLimit       metric.Int64ObservableGauge
	hold          metric.Float64ObservableGauge
	budget        metric.Float64ObservableGauge

	meter metric.Meter
	reg   metric.Registration
	sets  attrCache
}

// newInstruments makes the instruments. An instrument the meter fails to
// make is reported to otel.Handle and left a no-op, as instrumentation does.
func newInstruments(m metric.Meter) *instruments {
	in := &instruments{meter: m}
	check := func(err error) {
		if err != nil {
			otel.Handle(err)
		}
	}
	var err error
	in.attempts, err = m.Int64Counter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts sent, by outcome (success, transient, final) and reason."))
	check(err)
	in.retryDelay, err = m.Float64Histogram(MetricRetryDelay, metric.WithUnit("s"),
		metric.WithDescription("Wait before each retry, by kind (backoff, or server: Retry-After or a rate limit's reset)."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
	check(err)
	in.queue, err = m.Float64Histogram(MetricQueueDuration, metric.WithUnit("s"),
		metric.WithDescription("Time each attempt waited to be admitted before it was sent, by what it waited for (none when it did not)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	check(err)
	in.givenUp, err = m.Int64Counter(MetricGivenUp, metric.WithUnit("{request}"),
		metric.WithDescription("Requests whose retrying stopped while the outcome was still transient, or that were refused before they were sent, by stop reason."))
	check(err)
	in.requestDur, err = m.Float64Histogram(MetricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of logical requests, every attempt and wait included, by verdict."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60, 120))
	check(err)
	in.transitions, err = m.Int64Counter(MetricBreakerTransition, metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker changes of state, by the state entered."))
	check(err)

	in.breakerStatus, err = m.Int64ObservableGauge(MetricBreakerStatus, metric.WithUnit("{state}"),
		metric.WithDescription("Circuit breaker state per upstream: 1 for the state it is in, 0 for the others."))
	check(err)
	in.queued, err = m.Int64ObservableUpDownCounter(MetricQueued, metric.WithUnit("{request}"),
		metric.WithDescription("Requests waiting to be admitted: for a hold, their paced turn, the client-side limits or the breaker."))
	check(err)
	in.inFlight, err = m.Int64ObservableUpDownCounter(MetricInFlight, metric.WithUnit("{request}"),
		metric.WithDescription("Attempts in flight."))
	check(err)
	in.concLimit, err = m.Int64ObservableGauge(MetricConcurrencyLimit, metric.WithUnit("{request}"),
		metric.WithDescription("The adaptive concurrency limit learned for the upstream; 0 while none is (it has not pushed back)."))
	check(err)
	in.pace, err = m.Float64ObservableGauge(MetricPaceRate, metric.WithUnit("{request}/s"),
		metric.WithDescription("The rate requests are paced at, learned from rate-limit headers or from what the upstream accepts; 0 when not paced."))
	check(err)
	in.rlRemaining, err = m.Int64ObservableGauge(MetricRateLimitLeft, metric.WithUnit("{count}"),
		metric.WithDescription("What the upstream's last rate-limit headers said remains, per dimension; the limit again once the stated reset has passed."))
	check(err)
	in.rlLimit, err = m.Int64ObservableGauge(MetricRateLimitLimit, metric.WithUnit("{count}"),
		metric.WithDescription("The quota the upstream's last rate-limit headers stated, per dimension."))
	check(err)
	in.hold, err = m.Float64ObservableGauge(MetricHoldRemaining, metric.WithUnit("s"),
		metric.WithDescription("Time until the hold on the upstream (a 429's Retry-After, a used-up quota) ends; 0 when none."))
	check(err)
	in.budget, err = m.Float64ObservableGauge(MetricBudgetLeft, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries after upstream failures the retry budget allows now (not reported when the budget is disabled)."))
	check(err)
	return in
}

// observe registers the callback that reads rt's Stats for the gauges.
func (in *instruments) observe(rt *retryhttp.RetryTransport) {
	obs := []metric.Observable{in.breakerStatus, in.queued, in.pace, in.rlRemaining, in.rlLimit, in.hold, in.budget}
	if in.inFlight != nil {
		obs = append(obs, in.inFlight)
	}
	if in.concLimit != nil {
		obs = append(obs, in.concLimit)
	}
	for _, o := range obs {
		if o == nil {
			return // an instrument could not be made; reported already
		}
	}
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range rt.Stats() {
			in.observeStats(o, s)
		}
		return nil
	}, obs...)
	if err != nil {
		otel.Handle(err)
		return
	}
	in.reg = reg
}

func (in *instruments) close() error {
	if in.reg == nil {
		return nil
	}
	return in.reg.Unregister()
}

// observeStats reports one upstream's gauges.
func (in *instruments) observeStats(o metric.Observer, s retryhttp.Stats) {
	up := UpstreamKey.String(s.Key)
	only := metric.WithAttributes(up)
	o.ObserveInt64(in.queued, int64(s.Queued), only)
	for _, st := range breakerStates {
		v := int64(0)
		if s.Breaker == st {
			v = 1
		}
		o.ObserveInt64(in.breakerStatus, v, metric.WithAttributes(up, BreakerStateKey.String(breakerState(st))))
	}
	o.ObserveFloat64(in.pace, s.Rate, metric.WithAttributes(up, PacingKey.String(s.Pacing)))
	held := 0.0
	if s.HeldUntil.After(s.At) {
		held = s.HeldUntil.Sub(s.At).Seconds()
	}
	o.ObserveFloat64(in.hold, held, only)
	if !math.IsInf(s.BudgetLeft, 0) && !math.IsNaN(s.BudgetLeft) {
		o.ObserveFloat64(in.budget, s.BudgetLeft, only)
	}
	limits := s.Limits
	for _, d := range dimensions {
		q := limits.Quota(d.d)
		dim := metric.WithAttributes(up, DimensionKey.String(d.name))
		if q.HasRemaining {
			left := q.Remaining
			if q.HasLimit && !q.Reset.IsZero() && !s.At.Before(q.Reset) {
				left = q.Limit // the quota is whole again
			}
			o.ObserveInt64(in.rlRemaining, left, dim)
		}
		if q.HasLimit {
			o.ObserveInt64(in.rlLimit, q.Limit, dim)
		}
	}
	o.ObserveInt64(in.inFlight, int64(s.InFlight), only)
	o.ObserveInt64(in.concLimit, int64(s.Limit), only)
}

// attempt records the time an attempt waited to be admitted.
func (in *instruments) attempt(e retryhttp.Event) {
	in.queue.Record(ctxOf(e), e.Wait.Seconds(), in.sets.opt(queueSet, e.Key, waitKind(e.WaitKind), "", "").rec...)
}

// attemptDone counts an attempt by its outcome.
func (in *instruments) attemptDone(e retryhttp.Event) {
	m, _ := method(e.Method)
	in.attempts.Add(ctxOf(e), 1, in.sets.opt(attemptSet, e.Key, m, outcomeOf(e.StatusCode, e.Err, e.Retryable), reasonOf(e.StatusCode, e.Err, e.Retryable)).add...)
}

func (in *instruments) retry(e retryhttp.Event) {
	m, _ := method(e.Method)
	in.retryDelay.Record(ctxOf(e), e.Wait.Seconds(), in.sets.opt(retrySet, e.Key, m, waitKind(e.WaitKind), "").rec...)
}

func (in *instruments) giveUp(e retryhttp.Event) {
	m, _ := method(e.Method)
	in.givenUp.Add(ctxOf(e), 1, in.sets.opt(givenUpSet, e.Key, m, stopReason(e.Stop), "").add...)
}

func (in *instruments) breaker(e retryhttp.BreakerEvent) {
	in.transitions.Add(context.Background(), 1, metric.WithAttributes(UpstreamKey.String(e.Key), BreakerStateKey.String(breakerState(e.To))))
}

// request records a logical request's duration and verdict.
func (in *instruments) request(ctx context.Context, c *call, verdict string, d time.Duration) {
	in.requestDur.Record(ctx, d.Seconds(), in.sets.opt(requestSet, c.key, c.method, verdict, "").rec...)
}

func ctxOf(e retryhttp.Event) context.Context {
	if e.Context != nil {
		return e.Context
	}
	return context.Background()
}

// The attribute sets of the hot path are made once per combination and
// kept: a set is sorted and hashed when made, and the same few combinations
// come back on every request. The cache is bounded; past its size, sets are
// made afresh each time.
const maxCachedSets = 4096

type setShape uint8

const (
	queueSet setShape = iota
	attemptSet
	retrySet
	givenUpSet
	requestSet
)

type setKey struct {
	shape      setShape
	a, b, c, d string
}

type attrCache struct {
	mu sync.RWMutex
	m  map[setKey]setOpts
}

// setOpts are the options that record a measurement with one attribute
// set, as the slices the instruments' variadic methods take (passing a
// slice on does not allocate).
type setOpts struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

// opt returns the options for the set of shape with these values (empty
// ones left out).
func (ac *attrCache) opt(shape setShape, a, b, c, d string) setOpts {
	k := setKey{shape, a, b, c, d}
	ac.mu.RLock()
	o, ok := ac.m[k]
	ac.mu.RUnlock()
	if ok {
		return o
	}
	set := metric.WithAttributeSet(k.build())
	o = setOpts{rec: []metric.RecordOption{set}, add: []metric.AddOption{set}}
	ac.mu.Lock()
	if ac.m == nil {
		ac.m = make(map[setKey]setOpts)
	}
	if len(ac.m) < maxCachedSets {
		ac.m[k] = o
	}
	ac.mu.Unlock()
	return o
}

// build makes the set a key stands for.
func (k setKey) build() attribute.Set {
	kv := make([]attribute.KeyValue, 0, 4)
	if k.a != "" {
		kv = append(kv, UpstreamKey.String(k.a))
	}
	switch k.shape {
	case queueSet:
		kv = append(kv, WaitKindKey.String(k.b))
	case attemptSet:
		kv = append(kv, methodKey.String(k.b), OutcomeKey.String(k.c), ReasonKey.String(k.d))
	case retrySet:
		kv = append(kv, methodKey.String(k.b), WaitKindKey.String(k.c))
	case givenUpSet:
		kv = append(kv, methodKey.String(k.b), StopReasonKey.String(k.c))
	case requestSet:
		kv = append(kv, methodKey.String(k.b), VerdictKey.String(k.c))
	}
	return attribute.NewSet(kv...)
}
