package retryhttp

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// Per-upstream state (pacing, holds, client-side limits) lives in a bounded
// table: a client that talks to many hosts must not grow without bound. When
// it is full, the upstreams not used since the last maxUpstreams/2 new ones
// arrived are evicted (a least-recently-used rule counted in arrivals, so
// the request path never reads the clock for it).
const maxUpstreams = 1024

// upstreamKey names the quota a request draws on. By default that is the
// scheme, host and port; WithKeyFunc replaces it (to key by API key, say).
type upstreamKey struct {
	scheme, host, custom string
}

// WithKeyFunc sets how requests are grouped into upstreams, each with its own
// pacing, holds and client-side limits. The default groups by scheme, host
// and port. Key by API key when several keys with separate quotas share a
// host; the function must be fast and must not read the body.
//
// What f returns is never written out: Stats().Key, BreakerEvent.Key, log
// lines and a quota backend's keys name the upstream by a fingerprint,
// "key:" and 16 hex digits (the first 8 bytes of the value's SHA-256), the
// same in every process and different for different values. Returning the
// API key itself is therefore safe, and a label is fingerprinted too.
func WithKeyFunc(f func(*http.Request) string) Option {
	return Option{func(c *config) { c.keyFunc = f }}
}

// String is the key as Stats, logs, hooks and a shared quota backend name
// it: "scheme://host[:port]" by default, or the fingerprint of the
// WithKeyFunc value. That value is fingerprinted whatever it looks like:
// keying by API key is what the option is for, and no pattern tells every
// credential (a vendor's own prefix, a UUID) from a label.
func (k upstreamKey) String() string {
	if k.custom == "" && k.scheme != "" {
		return k.scheme + "://" + k.host
	}
	return fingerprint(k.custom)
}

func (t *RetryTransport) keyOf(req *http.Request) upstreamKey {
	if t.cfg.keyFunc != nil {
		return upstreamKey{custom: t.cfg.keyFunc(req)}
	}
	return upstreamKey{scheme: req.URL.Scheme, host: req.URL.Host}
}

// upstreamTable maps keys to their state, evicting idle entries when full.
type upstreamTable struct {
	mu      sync.RWMutex
	m       map[upstreamKey]*upstream
	arrived atomic.Uint64 // upstreams created so far: the table's clock
	last    atomic.Pointer[upstream]
}

// get returns the state for k, creating it with fresh when missing. Most
// transports talk to one upstream: the last one found is checked first.
func (tb *upstreamTable) get(k upstreamKey, fresh func() *upstream) *upstream {
	if u := tb.last.Load(); u != nil && u.key == k {
		return u
	}
	tb.mu.RLock()
	u := tb.m[k]
	tb.mu.RUnlock()
	if u != nil {
		if now := tb.arrived.Load(); u.touched.Load() != now {
			u.touched.Store(now)
		}
		tb.last.Store(u)
		return u
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if u = tb.m[k]; u != nil {
		return u
	}
	if tb.m == nil {
		tb.m = make(map[upstreamKey]*upstream)
	}
	if len(tb.m) >= maxUpstreams {
		tb.evict()
	}
	u = fresh()
	u.key = k
	u.touched.Store(tb.arrived.Add(1))
	tb.m[k] = u
	tb.last.Store(u)
	return u
}

// evict drops the upstreams untouched while the last maxUpstreams/2 arrived.
// Called with tb.mu held.
func (tb *upstreamTable) evict() {
	now := tb.arrived.Load()
	for k, u := range tb.m {
		if now-u.touched.Load() >= maxUpstreams/2 {
			delete(tb.m, k)
		}
	}
	tb.last.Store(nil)
}

// all returns every upstream in the table.
func (tb *upstreamTable) all() []*upstream {
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	us := make([]*upstream, 0, len(tb.m))
	for _, u := range tb.m {
		us = append(us, u)
	}
	return us
}

func (tb *upstreamTable) len() int {
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	return len(tb.m)
}
