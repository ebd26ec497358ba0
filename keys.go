package retryhttp

import (
	"net/http"
	"sync"
	"time"
)

// Per-upstream state (pacing, holds, client-side limits) lives in a bounded
// table: a client that talks to many hosts must not grow without bound.
const (
	maxUpstreams    = 1024
	upstreamIdleTTL = 10 * time.Minute
)

// upstreamKey names the quota a request draws on. By default that is the
// scheme, host and port; WithKeyFunc replaces it (to key by API key, say).
type upstreamKey struct {
	scheme, host, custom string
}

// WithKeyFunc sets how requests are grouped into upstreams, each with its own
// pacing, holds and client-side limits. The default groups by scheme, host
// and port. Key by API key when several keys with separate quotas share a
// host; the function must be fast and must not read the body.
func WithKeyFunc(f func(*http.Request) string) Option {
	return Option{func(c *config) { c.keyFunc = f }}
}

func (t *RetryTransport) keyOf(req *http.Request) upstreamKey {
	if t.cfg.keyFunc != nil {
		return upstreamKey{custom: t.cfg.keyFunc(req)}
	}
	return upstreamKey{scheme: req.URL.Scheme, host: req.URL.Host}
}

// upstreamTable maps keys to their state, evicting idle entries when full.
type upstreamTable struct {
	mu sync.RWMutex
	m  map[upstreamKey]*upstream
}

// get returns the state for k, creating it with fresh when missing.
func (tb *upstreamTable) get(k upstreamKey, now time.Time, fresh func() *upstream) *upstream {
	tb.mu.RLock()
	u := tb.m[k]
	tb.mu.RUnlock()
	if u != nil {
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
		tb.evict(now)
	}
	u = fresh()
	tb.m[k] = u
	return u
}

// evict drops upstreams idle for upstreamIdleTTL; if none is, it drops the
// least recently used one. Called with tb.mu held.
func (tb *upstreamTable) evict(now time.Time) {
	var oldestKey upstreamKey
	var oldest time.Time
	for k, u := range tb.m {
		last := u.lastUsedAt()
		if now.Sub(last) > upstreamIdleTTL {
			delete(tb.m, k)
			continue
		}
		if oldest.IsZero() || last.Before(oldest) {
			oldestKey, oldest = k, last
		}
	}
	if len(tb.m) >= maxUpstreams {
		delete(tb.m, oldestKey)
	}
}

func (tb *upstreamTable) len() int {
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	return len(tb.m)
}
