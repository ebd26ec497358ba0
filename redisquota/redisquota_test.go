package redisquota

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retryhttp/retryhttp"
)

const upstream = "https://api.test"

// rpm600 is one request of a 600-a-minute limit with one second's burst, as
// retryhttp books it: 10 a second, 10 at once.
var rpm600 = []retryhttp.QuotaTake{{Name: retryhttp.QuotaRequests, PerSecond: 10, Burst: 10, N: 1}}

// anyWait is a maxWait that books whatever the wait.
const anyWait = time.Duration(-1)

func TestSharedLimitIsExactAcrossClients(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	a, b := New(srv.client(t)), New(srv.client(t))
	for _, be := range []*Backend{a, b} { // connect and load the script first
		_, err := be.Take(ctx, "warm-up", rpm600, time.Now(), anyWait)
		require.NoError(t, err)
	}
	var slots []int64
	var starts []time.Time
	for i := 0; i < 30; i++ {
		be := a
		if i%2 == 1 {
			be = b
		}
		r, err := be.take(ctx, upstream, rpm600, anyWait)
		require.NoError(t, err)
		require.True(t, r.booked)
		slots, starts = append(slots, r.slot), append(starts, time.Now().Add(r.wait))
	}
	// On the server's clock: the first 10 start when booked (the burst);
	// from then on one every 100ms exactly, whichever client booked.
	for i := 1; i < 10; i++ {
		assert.Less(t, slots[i]-slots[0], int64(100*time.Millisecond/time.Microsecond), "booking %d is in the burst", i)
	}
	for i := 10; i < 30; i++ {
		assert.Equal(t, slots[0]+int64(i-9)*100_000, slots[i], "booking %d", i)
	}
	// On the callers' clock (the same machine's as the server's, here): no
	// start before its slot, and none much later.
	for i := range slots {
		slot := time.UnixMicro(slots[i])
		assert.False(t, starts[i].Before(slot), "booking %d leaves %v before its slot", i, slot.Sub(starts[i]))
		assert.Less(t, starts[i].Sub(slot), 25*time.Millisecond, "booking %d", i)
	}
}

func TestAllLimitsAreBookedTogether(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	be := New(srv.client(t))
	takes := []retryhttp.QuotaTake{
		{Name: retryhttp.QuotaRequests, PerSecond: 10, Burst: 10, N: 1},
		{Name: retryhttp.QuotaInputTokens, PerSecond: 100, Burst: 100, N: 250},
	}
	r, err := be.take(ctx, upstream, takes, anyWait)
	require.NoError(t, err)
	// 250 input tokens from a bucket of 100 refilled at 100 a second: 150
	// owed, 1.5s. The request limit alone would let it go at once.
	assert.InDelta(t, 1500*time.Millisecond, r.wait, float64(50*time.Millisecond))

	// The request bucket was booked too: nine more go at once, the tenth
	// after it waits.
	for i := 0; i < 9; i++ {
		wait, err := be.Take(ctx, upstream, rpm600, time.Now(), anyWait)
		require.NoError(t, err)
		assert.Less(t, wait, 50*time.Millisecond)
	}
	wait, err := be.Take(ctx, upstream, rpm600, time.Now(), anyWait)
	require.NoError(t, err)
	assert.InDelta(t, 100*time.Millisecond, wait, float64(50*time.Millisecond))
}

func TestHoldsAreShared(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	a, b := New(srv.client(t)), New(srv.client(t))
	now := time.Now()
	require.NoError(t, a.Hold(ctx, upstream, now.Add(2*time.Second), now))
	require.NoError(t, a.Hold(ctx, upstream, now.Add(time.Second), now), "an earlier hold")

	wait, err := b.Take(ctx, upstream, nil, time.Now(), anyWait)
	require.NoError(t, err)
	assert.InDelta(t, 2*time.Second, wait, float64(50*time.Millisecond), "the later hold wins, and reaches the other client")

	// Bookings start at the hold's end, and are spaced from there: the
	// burst at once, then one every 100ms.
	var slots []int64
	for i := 0; i < 11; i++ {
		r, err := b.take(ctx, upstream, rpm600, anyWait)
		require.NoError(t, err)
		slots = append(slots, r.slot)
	}
	for i := 1; i < 10; i++ {
		assert.Equal(t, slots[0], slots[i], "booking %d starts at the hold's end", i)
	}
	assert.Equal(t, slots[0]+100_000, slots[10])

	ttl, err := srv.client(t).PTTL(ctx, "retryhttp:quota:{"+upstream+"}:hold").Result()
	require.NoError(t, err)
	assert.InDelta(t, 2*time.Second+ttlMargin, ttl, float64(200*time.Millisecond), "the hold's key lives until it ends, plus the margin")

	require.NoError(t, a.Hold(ctx, upstream, now, now), "a hold already over is not sent")
}

func TestBookingTooLateBooksNothing(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	be := New(srv.client(t))
	oneASecond := []retryhttp.QuotaTake{{Name: retryhttp.QuotaRequests, PerSecond: 1, Burst: 1, N: 1}}
	_, err := be.Take(ctx, upstream, oneASecond, time.Now(), anyWait)
	require.NoError(t, err)

	r, err := be.take(ctx, upstream, oneASecond, 500*time.Millisecond)
	require.NoError(t, err)
	assert.False(t, r.booked)
	assert.InDelta(t, time.Second, r.wait, float64(50*time.Millisecond), "the wait it would have had")

	r, err = be.take(ctx, upstream, oneASecond, anyWait)
	require.NoError(t, err)
	assert.True(t, r.booked)
	assert.InDelta(t, time.Second, r.wait, float64(50*time.Millisecond), "a second, not two: the refused booking held no slot")
}

func TestKeysExpireAndArePrefixed(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	rdb := srv.client(t)
	be := New(rdb, WithPrefix("svc-a:"))
	for i := 0; i < 30; i++ {
		_, err := be.Take(ctx, upstream, rpm600, time.Now(), anyWait)
		require.NoError(t, err)
	}
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"svc-a:{" + upstream + "}:rpm"}, keys)
	// 30 bookings at 10 a second: the bucket is full again in 3s; the key
	// lives that long, plus the margin, and no longer.
	ttl, err := rdb.PTTL(ctx, keys[0]).Result()
	require.NoError(t, err)
	assert.InDelta(t, 3*time.Second+ttlMargin, ttl, float64(200*time.Millisecond))

	other := New(rdb) // another prefix: other buckets
	wait, err := other.Take(ctx, upstream, rpm600, time.Now(), anyWait)
	require.NoError(t, err)
	assert.Zero(t, wait)
}

func TestScriptCacheEmptied(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	rdb := srv.client(t)
	be := New(rdb)
	_, err := be.Take(ctx, upstream, rpm600, time.Now(), anyWait)
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err()) // as a restarted Redis would have
	_, err = be.Take(ctx, upstream, rpm600, time.Now(), anyWait)
	require.NoError(t, err, "EVALSHA falls back to EVAL")
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	now := time.Now()
	require.NoError(t, be.Hold(ctx, upstream, now.Add(time.Second), now))
}

func TestNoClientIsAnError(t *testing.T) {
	be := New(nil)
	now := time.Now()
	_, err := be.Take(context.Background(), upstream, rpm600, now, anyWait)
	assert.ErrorIs(t, err, errNoRedis)
	assert.ErrorIs(t, be.Hold(context.Background(), upstream, now.Add(time.Second), now), errNoRedis)
}

// Settling moves the shared bucket as the usage says: units given back go
// to the next bookings at once (never beyond a full bucket), units charged
// make them wait.
func TestSettleGivesBackAndCharges(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	rdb := srv.client(t)
	a, b := New(rdb), New(srv.client(t))
	otpm := func(n float64) []retryhttp.QuotaTake { // 1000 a minute, the minute's worth at once
		return []retryhttp.QuotaTake{{Name: retryhttp.QuotaOutputTokens, PerSecond: 1000.0 / 60, Burst: 1000, N: n}}
	}
	probe := func() time.Duration { // the wait 500 would have, booking nothing
		t.Helper()
		r, err := b.take(ctx, upstream, otpm(500), 0)
		require.NoError(t, err)
		require.False(t, r.booked)
		return r.wait
	}
	r, err := a.take(ctx, upstream, otpm(1000), anyWait)
	require.NoError(t, err)
	require.True(t, r.booked)
	assert.Less(t, r.wait, 50*time.Millisecond, "the whole bucket at once")
	assert.InDelta(t, 30*time.Second, probe(), float64(100*time.Millisecond), "500 more wait half a minute")

	require.NoError(t, a.Settle(ctx, upstream, otpm(-900), time.Now()), "booked 1000, used 100")
	r, err = b.take(ctx, upstream, otpm(500), 0)
	require.NoError(t, err)
	assert.True(t, r.booked, "the other client's 500 go at once")
	assert.Less(t, r.wait, 50*time.Millisecond)

	require.NoError(t, a.Settle(ctx, upstream, otpm(900), time.Now()), "an overrun is charged")
	assert.InDelta(t, time.Minute, probe(), float64(100*time.Millisecond), "1000 - 900 + 500 + 900 booked, and 500 more: 1000 beyond the bucket, a minute")

	require.NoError(t, a.Settle(ctx, upstream, otpm(-1e6), time.Now()), "more than was booked")
	n, err := rdb.Exists(ctx, "retryhttp:quota:{"+upstream+"}:"+retryhttp.QuotaOutputTokens).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a full bucket is no key")
	_, err = b.take(ctx, upstream, otpm(1000), anyWait)
	require.NoError(t, err)
	assert.InDelta(t, 30*time.Second, probe(), float64(100*time.Millisecond), "never beyond a full bucket: after 1000 at once, 500 more wait half a minute")

	require.NoError(t, a.Settle(ctx, upstream, nil, time.Now()), "nothing to settle")
	assert.ErrorIs(t, New(nil).Settle(ctx, upstream, otpm(-1), time.Now()), errNoRedis)
}

// usageBody answers 200 JSON bodies that report output tokens used.
type usageBody string

func (u usageBody) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"usage":{"input_tokens":5,"output_tokens":` + string(u) + `}}`)), Request: req}, nil
}

// Through the transport: process A books 1000 output tokens of the fleet's
// 1000 a minute and uses 100; its settlement gives 900 back in Redis, and
// process B's 500 go at once. Without it B would have to wait 30s, beyond
// its one second of queue wait, and fail at once with ErrRateLimited.
func TestTransportsSettleUsageInRedis(t *testing.T) {
	srv := startRedis(t)
	fleet := func(used string, be *Backend) *retryhttp.RetryTransport {
		return retryhttp.New(usageBody(used), retryhttp.WithQuotaBackend(be, 0.5), retryhttp.WithQuotaTimeout(time.Second),
			retryhttp.WithRateLimit(retryhttp.Limits{OutputTokensPerMinute: 1000}), retryhttp.WithRateLimitBurst(time.Minute),
			retryhttp.WithMaxQueueWait(time.Second))
	}
	send := func(rt http.RoundTripper, out int) error {
		req, err := http.NewRequest(http.MethodGet, upstream+"/v1/messages", nil)
		require.NoError(t, err)
		resp, err := rt.RoundTrip(req.WithContext(retryhttp.WithTokens(req.Context(), 0, out)))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	be := New(srv.client(t))
	require.NoError(t, send(fleet("100", be), 1000))
	probe := []retryhttp.QuotaTake{{Name: retryhttp.QuotaOutputTokens, PerSecond: 1000.0 / 60, Burst: 1000, N: 500}}
	// The settlement goes in the background: wait until 500 could go at
	// once (a probe that did book gives its 500 back at once).
	require.Eventually(t, func() bool {
		r, err := be.take(context.Background(), upstream, probe, 0)
		if r.booked {
			require.NoError(t, be.Settle(context.Background(), upstream, []retryhttp.QuotaTake{{Name: probe[0].Name, PerSecond: probe[0].PerSecond, Burst: 1000, N: -500}}, time.Now()))
		}
		return err == nil && r.booked
	}, 5*time.Second, 5*time.Millisecond, "A's 900 unused tokens are back in Redis")
	assert.NoError(t, send(fleet("500", New(srv.client(t))), 500), "B's 500 go at once")
}
