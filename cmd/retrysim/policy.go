package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/retryhttp/retryhttp"

	"github.com/retryhttp/retryhttp/internal/simkit"
)

// sender sends one logical request, built afresh by newReq for each
// attempt it makes, and returns what its caller would get.
type sender func(ctx context.Context, newReq func(context.Context) (*http.Request, error)) (*http.Response, error)

// policy is one way of sending that a scenario compares.
type policy struct {
	name  string // short, for the table and the chart
	about string // what it is exactly, for the legend under the table
	// client returns a sender over base for one client. A run with many
	// clients (contention) calls it once per client, so each has its own
	// retry state, as separate processes would.
	client func(base http.RoundTripper) sender
	// paces: it spaces requests by what it learns of the provider's rate
	// limit (retryhttp does; the hand-written loops do not).
	paces bool
}

// policyFor builds the policy the -policies flag calls key.
func policyFor(cfg config, key string) policy {
	switch key {
	case "none":
		return policy{
			name:   "no retries",
			about:  "a plain http.Client (go-cleanhttp's pooled transport): one attempt, whatever the answer",
			client: func(base http.RoundTripper) sender { return once(base) },
		}
	case "fixed":
		return policy{
			name: "fixed " + simkit.Round3(cfg.base),
			about: fmt.Sprintf("a hand-written loop over a plain http.Client: up to %d retries, %s apart; "+
				"it ignores Retry-After", cfg.maxRetries, simkit.Round3(cfg.base)),
			client: func(base http.RoundTripper) sender {
				return loop(base, cfg.maxRetries, func(int) time.Duration { return cfg.base })
			},
		}
	case "exponential":
		return policy{
			name: "exponential",
			about: fmt.Sprintf("a hand-written loop over a plain http.Client: up to %d retries after %s, "+
				"growing %gx up to %s, no jitter; it ignores Retry-After",
				cfg.maxRetries, simkit.Round3(cfg.base), cfg.multiplier, simkit.Round3(cfg.max)),
			client: func(base http.RoundTripper) sender {
				return loop(base, cfg.maxRetries, func(k int) time.Duration {
					return exponential(cfg.base, cfg.max, cfg.multiplier, k)
				})
			},
		}
	case "retryhttp":
		return policy{
			name: "retryhttp defaults",
			about: fmt.Sprintf("retryhttp.New(nil) with its defaults: %d retries, %s doubling to %s plus up to %s "+
				"of jitter; honours Retry-After and retry-after-ms, paces by rate-limit headers, "+
				"circuit breaker and retry budget on",
				retryhttp.DefaultMaxRetries, simkit.Round3(retryhttp.DefaultBackoffBase),
				simkit.Round3(retryhttp.DefaultBackoffMax), simkit.Round3(retryhttp.DefaultJitter)),
			client: func(base http.RoundTripper) sender {
				return through(retryhttp.New(base, cfg.defaultsExtra...))
			},
			paces: true,
		}
	}
	opts, text := cfg.customOptions()
	return policy{
		name:  "custom",
		about: "retryhttp.New(nil, " + text + ")",
		client: func(base http.RoundTripper) sender {
			return through(retryhttp.New(base, opts...))
		},
		paces: true,
	}
}

// customOptions turns the policy flags into retryhttp options, and says
// which were given.
func (cfg config) customOptions() ([]retryhttp.Option, string) {
	opts := []retryhttp.Option{
		retryhttp.WithMaxRetries(cfg.maxRetries),
		retryhttp.WithBackoff(cfg.base, cfg.max),
		retryhttp.WithBackoffMultiplier(cfg.multiplier),
		retryhttp.WithJitter(cfg.jitter),
		retryhttp.WithJitterStrategy(cfg.strategy),
		retryhttp.WithAttemptTimeout(cfg.attemptTimeout),
	}
	if !cfg.breaker {
		opts = append(opts, retryhttp.WithCircuitBreaker(retryhttp.CircuitBreaker{Disabled: true}))
	}
	if !cfg.budget {
		opts = append(opts, retryhttp.WithRetryBudget(retryhttp.RetryBudget{Disabled: true}))
	}
	var text []string
	strategyName := map[retryhttp.JitterStrategy]string{
		retryhttp.AdditiveJitter:     "AdditiveJitter",
		retryhttp.FullJitter:         "FullJitter",
		retryhttp.DecorrelatedJitter: "DecorrelatedJitter",
	}
	backoffDone := false
	for _, name := range policyFlags { // in the order of the options above
		if !slices.Contains(cfg.policySet, name) {
			continue
		}
		switch name {
		case "max-retries":
			text = append(text, fmt.Sprintf("WithMaxRetries(%d)", cfg.maxRetries))
		case "base", "max":
			if !backoffDone {
				text = append(text, fmt.Sprintf("WithBackoff(%s, %s)", simkit.Round3(cfg.base), simkit.Round3(cfg.max)))
				backoffDone = true
			}
		case "multiplier":
			text = append(text, fmt.Sprintf("WithBackoffMultiplier(%g)", cfg.multiplier))
		case "jitter":
			text = append(text, fmt.Sprintf("WithJitter(%s)", simkit.Round3(cfg.jitter)))
		case "strategy":
			text = append(text, "WithJitterStrategy("+strategyName[cfg.strategy]+")")
		case "attempt-timeout":
			text = append(text, fmt.Sprintf("WithAttemptTimeout(%s)", simkit.Round3(cfg.attemptTimeout)))
		case "breaker":
			if !cfg.breaker {
				text = append(text, "WithCircuitBreaker(CircuitBreaker{Disabled: true})")
			}
		case "budget":
			if !cfg.budget {
				text = append(text, "WithRetryBudget(RetryBudget{Disabled: true})")
			}
		}
	}
	return opts, strings.Join(text, ", ")
}

// contentionPolicies are the jitter strategies the contention scenario
// compares. All are retryhttp with the same backoff, starting at the write's
// hold time and capped at 100 times it, and with the breaker and the retry
// budget off, so that the jitter is the only difference: the comparison of
// AWS's study. The custom policy joins them when policy flags are given.
func contentionPolicies(cfg config) []policy {
	base, maxWait := cfg.hold, 100*cfg.hold
	retries := contentionRetries
	common := []retryhttp.Option{
		retryhttp.WithMaxRetries(retries),
		retryhttp.WithBackoff(base, maxWait),
		retryhttp.WithCircuitBreaker(retryhttp.CircuitBreaker{Disabled: true}),
		retryhttp.WithRetryBudget(retryhttp.RetryBudget{Disabled: true}),
	}
	strategy := func(name, about string, opts ...retryhttp.Option) policy {
		all := append(append([]retryhttp.Option(nil), common...), opts...)
		return policy{
			name: name,
			about: fmt.Sprintf("retryhttp, %d retries, backoff %s doubling to %s, breaker and budget off; %s",
				retries, simkit.Round3(base), simkit.Round3(maxWait), about),
			client: func(b http.RoundTripper) sender { return through(retryhttp.New(b, all...)) },
			paces:  true,
		}
	}
	ps := []policy{
		strategy("no jitter", "WithJitter(0): every client waits exactly the same", retryhttp.WithJitter(0)),
		strategy("additive", "the default strategy: the wait plus up to "+simkit.Round3(base)+" (WithJitter)",
			retryhttp.WithJitter(base)),
		strategy("full", "WithJitterStrategy(FullJitter): a uniform draw from [0, wait)",
			retryhttp.WithJitterStrategy(retryhttp.FullJitter)),
		strategy("decorrelated", "WithJitterStrategy(DecorrelatedJitter): a draw from [base, 3 x the last wait)",
			retryhttp.WithJitterStrategy(retryhttp.DecorrelatedJitter)),
	}
	if len(cfg.policySet) > 0 {
		ps = append(ps, policyFor(cfg, "custom"))
	}
	return ps
}

// contentionRetries is enough retries for every client to finish in the
// contention scenario even without jitter, where each round lets only about
// -capacity clients through.
const contentionRetries = 30

// through sends through a RetryTransport.
func through(rt *retryhttp.RetryTransport) sender {
	client := &http.Client{Transport: rt}
	return func(ctx context.Context, newReq func(context.Context) (*http.Request, error)) (*http.Response, error) {
		req, err := newReq(ctx)
		if err != nil {
			return nil, err
		}
		return client.Do(req)
	}
}

// once sends each request once.
func once(base http.RoundTripper) sender {
	return loop(base, 0, nil)
}

// loop is the retry loop people write by hand: send, and on a transient
// failure wait wait(k) before retry k, at most retries times. It neither
// reads Retry-After nor adds jitter.
func loop(base http.RoundTripper, retries int, wait func(k int) time.Duration) sender {
	client := &http.Client{Transport: base}
	return func(ctx context.Context, newReq func(context.Context) (*http.Request, error)) (*http.Response, error) {
		for k := 0; ; k++ {
			req, err := newReq(ctx)
			if err != nil {
				return nil, err
			}
			resp, err := client.Do(req)
			if k == retries || !transient(ctx, resp, err) {
				return resp, err
			}
			if resp != nil {
				io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
			}
			if !simkit.Sleep(ctx, wait(k+1)) {
				return nil, ctx.Err()
			}
		}
	}
}

// transient is the hand-written loop's test: a network error, or 408, 429
// or a 5xx, as such loops usually check.
func transient(ctx context.Context, resp *http.Response, err error) bool {
	if err != nil {
		return ctx.Err() == nil && !errors.Is(err, context.Canceled)
	}
	s := resp.StatusCode
	return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500
}

// exponential is base·multiplier^(k-1), capped at ceiling (or at base,
// when the ceiling is below it, as retryhttp.WithBackoff does).
func exponential(base, ceiling time.Duration, multiplier float64, k int) time.Duration {
	top := float64(max(ceiling, base))
	d := float64(base)
	for i := 1; i < k && d < top; i++ {
		d *= multiplier
	}
	return time.Duration(min(d, top))
}
