package retryhttp

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPerRequestOptions(t *testing.T) {
	cases := []struct {
		name     string
		ctx      func() context.Context
		attempts int
	}{
		{"transport default", context.Background, 6},
		{"no retry", func() context.Context { return NoRetry(context.Background()) }, 1},
		{"other max retries", func() context.Context {
			return ContextWithOptions(context.Background(), MaxRetries(2))
		}, 3},
		{"later options win", func() context.Context {
			ctx := ContextWithOptions(context.Background(), MaxRetries(2))
			return ContextWithOptions(ctx, MaxRetries(1))
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mock, _ := scripted(t, step{status: 503})
			rt := New(mock, WithClock(autoClock()))
			resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(c.ctx()))
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, c.attempts, Attempts(resp))
		})
	}
}

func TestPerRequestOptionsDoNotLeakIntoTheTransport(t *testing.T) {
	mock, _ := scripted(t, step{status: 503})
	clk := autoClock()
	rt := New(mock, WithClock(clk), WithJitter(0), WithMaxRetries(1))
	ctx := ContextWithOptions(context.Background(), Backoff(time.Minute, time.Hour))
	resp, err := rt.RoundTrip(get(t, "https://api.test/x").WithContext(ctx))
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = rt.RoundTrip(get(t, "https://api.test/x"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []time.Duration{time.Minute, time.Second}, clk.Sleeps())
}

// requestOptionCases pairs every per-request constructor with its
// transport-wide counterpart and the change both make to the default
// policy. Arguments that need clamping are chosen so the clamping shows.
var requestOptionCases = []struct {
	name string
	opt  RequestOption
	with Option
	set  func(*policy)
}{
	{"MaxRetries", MaxRetries(-1), WithMaxRetries(-1), func(p *policy) { p.maxRetries = 0 }},
	{"Backoff", Backoff(-time.Second, -time.Second), WithBackoff(-time.Second, -time.Second),
		func(p *policy) { p.backoffBase, p.backoffMax = 0, 0 }},
	{"BackoffMultiplier", BackoffMultiplier(0.5), WithBackoffMultiplier(0.5), func(p *policy) { p.multiplier = 1 }},
	{"Jitter", Jitter(-time.Second), WithJitter(-time.Second), func(p *policy) { p.jitter = 0 }},
	{"UseJitterStrategy", UseJitterStrategy(FullJitter), WithJitterStrategy(FullJitter),
		func(p *policy) { p.jitterStrategy = FullJitter }},
	{"MaxRetryAfter", MaxRetryAfter(time.Second), WithMaxRetryAfter(time.Second), func(p *policy) { p.maxRetryAfter = time.Second }},
	{"MaxQueueWait", MaxQueueWait(time.Second), WithMaxQueueWait(time.Second), func(p *policy) { p.maxQueueWait = time.Second }},
	{"AttemptTimeout", AttemptTimeout(time.Second), WithAttemptTimeout(time.Second), func(p *policy) { p.attemptTimeout = time.Second }},
	{"MaxBufferedBody", MaxBufferedBody(-1), WithMaxBufferedBody(-1), func(p *policy) { p.maxBufferedBody = 0 }},
	{"Classify", Classify(stopAll), WithClassifier(stopAll), func(p *policy) { p.classifier = stopAll }},
	{"IdempotencyKey", IdempotencyKey(), WithIdempotencyKey(), func(p *policy) { p.idempotencyKey = true }},
	{"IdempotencyGuard", IdempotencyGuard(), WithIdempotencyGuard(), func(p *policy) { p.idempotencyGuard = true }},
	{"FirstEventCheck", FirstEventCheck(-time.Second, 1024), WithFirstEventCheck(-time.Second, 1024),
		func(p *policy) { p.firstEventTimeout, p.firstEventMax = 0, 1024 }},
}

func stopAll(*http.Response, error) Verdict { return Stop }

// assertSamePolicy compares policies; the classifier, a func, by its
// verdict on one outcome.
func assertSamePolicy(t *testing.T, want, got policy) {
	t.Helper()
	verdict := func(p policy) Verdict {
		if p.classifier == nil {
			return Default
		}
		return p.classifier(nil, errors.New("x"))
	}
	assert.Equal(t, verdict(want), verdict(got), "classifier")
	want.classifier, got.classifier = nil, nil
	assert.Equal(t, want, got)
}

// Each per-request constructor changes its own setting, and only it, for
// the request made with the context, not the transport's; its WithX
// counterpart makes the same change transport-wide.
func TestRequestOptionOverridesItsField(t *testing.T) {
	defaults := defaultConfig().policy
	for _, c := range requestOptionCases {
		t.Run(c.name, func(t *testing.T) {
			want := defaults
			c.set(&want)
			rt := New(nil)
			ctx := ContextWithOptions(context.Background(), c.opt)
			assertSamePolicy(t, want, *rt.requestPolicy(requestOptions(ctx)))
			assertSamePolicy(t, defaults, rt.cfg.policy)
			assertSamePolicy(t, want, New(nil, c.with).cfg.policy)
		})
	}
}

// The table above covers every setting of the policy and every exported
// function that returns a RequestOption, so a new one cannot be left out.
func TestRequestOptionCasesAreComplete(t *testing.T) {
	defaults := reflect.ValueOf(defaultConfig().policy)
	changed := map[string]bool{}
	for _, c := range requestOptionCases {
		p := defaultConfig().policy
		c.set(&p)
		v := reflect.ValueOf(p)
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if f.Type.Kind() == reflect.Func {
				changed[f.Name] = changed[f.Name] || !v.Field(i).IsNil()
			} else if !v.Field(i).Equal(defaults.Field(i)) {
				changed[f.Name] = true
			}
		}
	}
	for i := 0; i < defaults.NumField(); i++ {
		name := defaults.Type().Field(i).Name
		assert.True(t, changed[name], "no per-request constructor sets policy.%s", name)
	}

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	tested := map[string]bool{}
	for _, c := range requestOptionCases {
		tested[c.name] = true
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil {
				continue
			}
			if res, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && res.Name == "RequestOption" {
				assert.True(t, tested[fn.Name.Name], "%s is not in requestOptionCases", fn.Name.Name)
			}
		}
	}
}

// Per-request options accumulate: an outer context's apply first, a later
// call wins on the same setting, and contexts derived from one parent do
// not see each other's options (outer's list has spare capacity that the
// two derived lists must not share).
func TestRequestOptionsAccumulate(t *testing.T) {
	rt := New(nil)
	base := ContextWithOptions(context.Background(), MaxRetries(2), Jitter(0))
	outer := ContextWithOptions(base, MaxBufferedBody(1))
	inner := ContextWithOptions(outer, MaxRetries(1))
	sibling := ContextWithOptions(outer, AttemptTimeout(time.Second))

	p := rt.requestPolicy(requestOptions(inner))
	assert.Equal(t, 1, p.maxRetries, "the later call wins")
	assert.Equal(t, time.Duration(0), p.jitter)
	assert.Equal(t, int64(1), p.maxBufferedBody)
	assert.Equal(t, time.Duration(0), p.attemptTimeout, "a sibling's option leaked in")

	p = rt.requestPolicy(requestOptions(sibling))
	assert.Equal(t, 2, p.maxRetries, "a sibling's option leaked in")
	assert.Equal(t, time.Duration(0), p.jitter)
	assert.Equal(t, int64(1), p.maxBufferedBody)
	assert.Equal(t, time.Second, p.attemptTimeout)

	p = rt.requestPolicy(requestOptions(outer))
	assert.Equal(t, 2, p.maxRetries)
	assert.Equal(t, time.Duration(0), p.attemptTimeout)
}

// One context, and so one RequestOption, may serve many requests at once
// (go test -race).
func TestRequestOptionsAreSafeToShare(t *testing.T) {
	rt := New(nil)
	ctx := ContextWithOptions(context.Background(), BackoffMultiplier(0.5), Backoff(-1, -1))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := rt.requestPolicy(requestOptions(ctx))
			assert.Equal(t, 1.0, p.multiplier)
		}()
	}
	wg.Wait()
}

// Passing a transport-wide Option (WithLogger, WithRateLimit, ...) to
// ContextWithOptions must not compile; a test cannot run code that does not
// compile, so this checks the types instead. The type switch in
// requestOptionIsNotOption fails to compile ("duplicate case") if
// RequestOption is ever made an alias of Option; the test fails if either
// becomes assignable to the other (say, through an interface).
func requestOptionIsNotOption(v any) bool {
	switch v.(type) {
	case Option:
		return false
	case RequestOption:
		return true
	}
	return false
}

func TestRequestOptionIsNotAnOption(t *testing.T) {
	assert.True(t, requestOptionIsNotOption(MaxRetries(0)))
	assert.False(t, requestOptionIsNotOption(WithMaxRetries(0)))
	opt, req := reflect.TypeFor[Option](), reflect.TypeFor[RequestOption]()
	assert.False(t, opt.AssignableTo(req), "an Option can be given to ContextWithOptions")
	assert.False(t, req.AssignableTo(opt), "a RequestOption can be given to New")
}
