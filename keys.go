package retryhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
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
// scheme, host and port; WithKeyFunc replaces it (to key by API key, say);
// WithKeyByModel adds the request's model to either.
type upstreamKey struct {
	scheme, host, custom string
	model                string // as written out (see modelLabel); "" without WithKeyByModel
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
// [WithKeyByModel] adds the request's model to what f returns; [ModelOf] reads
// it for a key function of your own.
func WithKeyFunc(f func(*http.Request) string) Option {
	return Option{func(c *config) { c.keyFunc = f }}
}

// String is the key as Stats, logs, hooks and a shared quota backend name
// it: "scheme://host[:port]" by default, or the fingerprint of the
// WithKeyFunc value. That value is fingerprinted whatever it looks like:
// keying by API key is what the option is for, and no pattern tells every
// credential (a vendor's own prefix, a UUID) from a label. With
// WithKeyByModel, "#" and the model follow: "https://api.anthropic.com#claude-sonnet-4-5".
func (k upstreamKey) String() string {
	base := fingerprint(k.custom)
	if k.custom == "" && k.scheme != "" {
		base = k.scheme + "://" + k.host
	}
	if k.model != "" {
		return base + "#" + k.model
	}
	return base
}

// keyOf sets *k, a zero key, to req's upstream key.
func (t *RetryTransport) keyOf(req *http.Request, k *upstreamKey) {
	if t.cfg.keyFunc != nil {
		k.custom = t.cfg.keyFunc(req)
	} else {
		k.scheme, k.host = req.URL.Scheme, req.URL.Host
	}
	if t.cfg.keyByModel {
		k.model = modelLabel(ModelOf(req))
	}
}

// WithKeyByModel adds the request's model (see [ModelOf]) to its upstream key,
// so that pacing, holds, client-side limits, the circuit breaker and the
// retry budget apply per model: providers limit each model on its own
// (Anthropic and OpenAI per model, Gemini per model and project), and a
// burst or an outage on one model should not hold back another. It works
// with the default key (per host) and with [WithKeyFunc] (per API key, say).
// A request that names no model keeps the key without one.
//
// The model is read from the body through req.GetBody, which the official
// SDKs and [http.NewRequest] set, so the body itself is never consumed; a
// body without GetBody is not read. The model is written out in [Stats] keys,
// logs and hooks after a "#" ("https://api.openai.com#gpt-5-mini"): a model
// name is not a credential. One that is longer than 128 bytes or holds
// characters other than letters, digits and ._:/@+- is written as its
// fingerprint instead.
func WithKeyByModel() Option {
	return Option{func(c *config) { c.keyByModel = true }}
}

// maxModelScan bounds how much of a request body ModelOf reads: the SDKs
// may write "model" after the messages.
const maxModelScan = maxEstimateBody

// maxModelLabel is the longest model name written out as it is.
const maxModelLabel = 128

// ModelOf returns the model an LLM API request names, or "": the string
// "model" at the top level of its JSON body (OpenAI, Anthropic and the APIs
// compatible with them), read through req.GetBody so that req.Body is not
// consumed, at most 8 MiB of it, holding only a few kilobytes at a time;
// else the model in the URL's path, as Gemini names it
// (/v1beta/models/gemini-2.5-flash:generateContent) and Azure OpenAI its
// deployment (/openai/deployments/my-gpt/chat/completions). Use it in a
// [WithKeyFunc] of your own; [WithKeyByModel] adds it to the default key.
func ModelOf(req *http.Request) string {
	if req == nil {
		return ""
	}
	if m := modelFromBody(req); m != "" {
		return m
	}
	if req.URL != nil {
		return modelFromPath(req.URL.Path)
	}
	return ""
}

// modelSink keeps the model string the scanner captures.
type modelSink struct{ model string }

func (s *modelSink) value(_, _ jsonKey, raw []byte) {
	json.Unmarshal(raw, &s.model) // not a string: "" stays
}

func modelFromBody(req *http.Request) string {
	if req.GetBody == nil || req.ContentLength == 0 {
		return ""
	}
	rc, err := req.GetBody()
	if err != nil || rc == nil || rc == http.NoBody {
		return ""
	}
	defer rc.Close()
	var sink modelSink
	scan := jsonScanner{mode: scanModel, sink: &sink}
	buf := make([]byte, 4<<10)
	object := false // the body has been seen to open with an object
	for read := 0; read < maxModelScan && !scan.done; {
		n, err := rc.Read(buf[:min(len(buf), maxModelScan-read)])
		if n > 0 {
			if !object {
				// Anything but an object (a form, an upload) is not
				// read further.
				if i := bytes.IndexFunc(buf[:n], func(r rune) bool { return !strings.ContainsRune(" \t\r\n", r) }); i >= 0 {
					if buf[i] != '{' {
						return ""
					}
					object = true
				}
			}
			scan.feed(buf[:n])
			read += n
		}
		if err != nil {
			break
		}
	}
	return sink.model
}

// modelFromPath finds the model in a Gemini or Azure OpenAI path.
func modelFromPath(p string) string {
	for _, seg := range [...]string{"/models/", "/deployments/"} {
		if i := strings.Index(p, seg); i >= 0 {
			m := p[i+len(seg):]
			if j := strings.IndexAny(m, ":/"); j >= 0 {
				m = m[:j]
			}
			return m
		}
	}
	return ""
}

// modelLabel is how a model is written out in keys: as it is when it looks
// like a model name, else its fingerprint.
func modelLabel(m string) string {
	if m == "" {
		return ""
	}
	if len(m) > maxModelLabel {
		return fingerprint(m)
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '/' || c == '@' || c == '+' || c == '-') {
			return fingerprint(m)
		}
	}
	return m
}

// upstreamTable maps keys to their state, evicting idle entries when full.
type upstreamTable struct {
	mu      sync.RWMutex
	m       map[upstreamKey]*upstream
	arrived atomic.Uint64 // upstreams created so far: the table's clock
	last    atomic.Pointer[upstream]
}

// get returns the state for *k, creating it with fresh when missing. Most
// transports talk to one upstream: the last one found is checked first,
// without the lock, and k is passed by pointer, not copied, on the way.
func (tb *upstreamTable) get(k *upstreamKey, fresh func() *upstream) *upstream {
	if u := tb.last.Load(); u != nil && u.key.is(k) {
		return u
	}
	return tb.find(k, fresh)
}

// is reports whether k and o name the same upstream: k == o, the host
// first, since that is what tells most keys apart. Most keys have neither
// a custom part nor a model: for them the lengths settle it, without the
// call that comparing two strings of equal length makes.
func (k *upstreamKey) is(o *upstreamKey) bool {
	if k.host != o.host || k.scheme != o.scheme {
		return false
	}
	if len(k.custom)+len(k.model) == 0 {
		return len(o.custom)+len(o.model) == 0
	}
	return k.custom == o.custom && k.model == o.model
}

// lastHost is the URL host of the upstream get found last: a host a
// request was sent to, and so one validateRequest found valid. It is ""
// before the first request and for keys from WithKeyFunc, which hold no
// host.
func (tb *upstreamTable) lastHost() string {
	if u := tb.last.Load(); u != nil {
		return u.key.host
	}
	return ""
}

// find is get past the last upstream found: under the read lock, then,
// for a new upstream, the write lock.
func (tb *upstreamTable) find(k *upstreamKey, fresh func() *upstream) *upstream {
	tb.mu.RLock()
	u := tb.m[*k]
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
	if u = tb.m[*k]; u != nil {
		return u
	}
	if tb.m == nil {
		tb.m = make(map[upstreamKey]*upstream)
	}
	if len(tb.m) >= maxUpstreams {
		tb.evict()
	}
	u = fresh()
	u.key = *k
	u.touched.Store(tb.arrived.Add(1))
	tb.m[*k] = u
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
