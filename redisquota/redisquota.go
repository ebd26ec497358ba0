package redisquota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/retryhttp/retryhttp"
)

// DefaultPrefix starts every key a Backend writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "retryhttp:quota:"

// ttlMargin is how much longer than needed a key lives: a key that expires a
// little late costs nothing, one that expires early would forget a booking.
const ttlMargin = time.Second

// Backend is a retryhttp.QuotaBackend kept in Redis. It is safe for
// concurrent use; processes that share quotas use Backends with the same
// Redis and prefix.
type Backend struct {
	client redis.UniversalClient
	prefix string
}

var (
	_ retryhttp.QuotaBackend = (*Backend)(nil)
	_ retryhttp.QuotaSettler = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the prefix of every key the Backend writes (DefaultPrefix
// by default): services that must not share quotas use different prefixes
// on one Redis. It must not contain "{", which would break the Redis
// Cluster hash tag that keeps one upstream's keys together.
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = prefix }
}

// New returns a Backend that keeps quotas in client's Redis (a *redis.Client,
// a *redis.ClusterClient or a failover client).
func New(client redis.UniversalClient, opts ...Option) *Backend {
	b := &Backend{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Preload loads the Backend's scripts into Redis's script cache (into every
// shard's, for a cluster) and so checks that Redis answers. It is optional:
// a script missing from the cache is sent in full when first used (and
// after Redis restarts), but a service that calls Preload at startup, and
// keeps connections open with the client's MinIdleConns, spares its first
// requests that round trip.
func (b *Backend) Preload(ctx context.Context) error {
	if b.client == nil {
		return errNoRedis
	}
	for _, s := range []*redis.Script{takeScript, holdScript, settleScript} {
		if err := s.Load(ctx, b.client).Err(); err != nil {
			return err
		}
	}
	return nil
}

// takeScript books every limit of one request and reads the hold, on the
// server's clock, in microseconds.
//
// KEYS[1] is the hold; KEYS[2..] one bucket per limit.
// ARGV[1] is the longest wait the caller accepts (negative: any);
// ARGV[2], ARGV[3] for the first bucket, and so on: its tolerance
// (burst·interval) and the booking's cost (n·interval).
//
// It returns {booked (1 or 0), wait, start}: how long from the server's now
// until the attempt may start, and that start on the server's clock.
var takeScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local from = now
local hold = tonumber(redis.call('GET', KEYS[1]) or 0)
if hold > from then from = hold end
local start = from
local tats = {}
for i = 2, #KEYS do
	local j = 2 * i - 2
	local tat = tonumber(redis.call('GET', KEYS[i]) or 0)
	if tat < from then tat = from end
	tat = tat + tonumber(ARGV[j + 1])
	tats[i] = tat
	local s = tat - tonumber(ARGV[j])
	if s > start then start = s end
end
local wait = math.ceil(start - now)
local limit = tonumber(ARGV[1])
if limit >= 0 and wait > limit then
	return {0, wait, math.ceil(start)}
end
local margin = tonumber(ARGV[#ARGV])
for i = 2, #KEYS do
	local ttl = math.ceil((tats[i] - now) / 1000) + margin
	redis.call('SET', KEYS[i], string.format('%.0f', tats[i]), 'PX', ttl)
end
return {1, wait, math.ceil(start)}
`)

// holdScript records a hold of ARGV[1] microseconds from the server's now
// on KEYS[1], unless a later one is in force. ARGV[2] is the TTL margin in
// milliseconds.
var holdScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local hold = now + tonumber(ARGV[1])
if hold > tonumber(redis.call('GET', KEYS[1]) or 0) then
	local ttl = math.ceil(tonumber(ARGV[1]) / 1000) + tonumber(ARGV[2])
	redis.call('SET', KEYS[1], string.format('%.0f', hold), 'PX', ttl)
end
return 1
`)

// settleScript moves buckets' theoretical arrival times, on the server's
// clock, in microseconds: back for units given back (never before now,
// which is a full bucket: the key is then deleted), forth for units charged
// (from now at the earliest, as a booking would).
//
// KEYS[1..] are the buckets; ARGV[i] the change of KEYS[i] (n·interval,
// signed); ARGV[#KEYS+1] the TTL margin in milliseconds.
var settleScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local margin = tonumber(ARGV[#KEYS + 1])
for i = 1, #KEYS do
	local tat = tonumber(redis.call('GET', KEYS[i]) or 0)
	if tat < now then tat = now end
	tat = tat + tonumber(ARGV[i])
	if tat > now then
		local ttl = math.ceil((tat - now) / 1000) + margin
		redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', ttl)
	else
		redis.call('DEL', KEYS[i])
	end
end
return 1
`)

// Settle implements retryhttp.QuotaSettler: it gives back (negative N) or
// charges (positive N) units of key's buckets, by the Redis server's clock,
// in one round trip. now is not used, as in Take.
func (b *Backend) Settle(ctx context.Context, key string, deltas []retryhttp.QuotaTake, now time.Time) error {
	if b.client == nil {
		return errNoRedis
	}
	keys := make([]string, 0, len(deltas))
	args := make([]any, 0, len(deltas)+1)
	for _, d := range deltas {
		if !(d.PerSecond > 0) || d.N == 0 || math.IsNaN(d.N) || math.IsInf(d.PerSecond, 1) {
			continue // no limit to settle on
		}
		keys = append(keys, b.key(key, d.Name))
		args = append(args, d.N*1e6/d.PerSecond) // µs
	}
	if len(keys) == 0 {
		return nil
	}
	args = append(args, ttlMargin.Milliseconds())
	return settleScript.Run(ctx, b.client, keys, args...).Err()
}

// Take implements retryhttp.QuotaBackend: it books takes on key's buckets
// and returns how long the attempt must wait, by the Redis server's clock.
// now is not used: the server's clock is the only one a bucket is kept on.
// A negative maxWait books whatever the wait.
func (b *Backend) Take(ctx context.Context, key string, takes []retryhttp.QuotaTake, now time.Time, maxWait time.Duration) (time.Duration, error) {
	r, err := b.take(ctx, key, takes, maxWait)
	return r.wait, err
}

// booking is what the take script answered, for Take and for tests.
type booking struct {
	wait   time.Duration
	booked bool
	slot   int64 // the start on the server's clock, in µs since the epoch
}

func (b *Backend) take(ctx context.Context, key string, takes []retryhttp.QuotaTake, maxWait time.Duration) (booking, error) {
	if b.client == nil {
		return booking{}, errNoRedis
	}
	keys := make([]string, 1, 1+len(takes))
	keys[0] = b.key(key, "hold")
	args := make([]any, 1, 2+2*len(takes))
	args[0] = int64(-1) // any wait
	if maxWait >= 0 {
		args[0] = maxWait.Microseconds()
	}
	for _, t := range takes {
		if !(t.PerSecond > 0) || !(t.N > 0) || math.IsInf(t.PerSecond, 1) {
			continue // no limit to book on
		}
		interval := 1e6 / t.PerSecond // µs per unit
		keys = append(keys, b.key(key, t.Name))
		args = append(args, max(t.Burst, 1)*interval, t.N*interval)
	}
	args = append(args, ttlMargin.Milliseconds())
	res, err := takeScript.Run(ctx, b.client, keys, args...).Int64Slice()
	if err != nil {
		return booking{}, err
	}
	if len(res) != 3 {
		return booking{}, fmt.Errorf("redisquota: unexpected reply %v", res)
	}
	return booking{wait: time.Duration(res[1]) * time.Microsecond, booked: res[0] == 1, slot: res[2]}, nil
}

// Hold implements retryhttp.QuotaBackend: key is held until until (on the
// caller's clock, whose time is now), unless a later hold is in force. What
// is sent is the hold's length, which the script adds to the server's clock:
// the hold ends at most one way's latency late, never early.
func (b *Backend) Hold(ctx context.Context, key string, until, now time.Time) error {
	d := until.Sub(now)
	if d <= 0 {
		return nil
	}
	if b.client == nil {
		return errNoRedis
	}
	return holdScript.Run(ctx, b.client, []string{b.key(key, "hold")}, d.Microseconds(), ttlMargin.Milliseconds()).Err()
}

// key is the Redis key of one upstream's bucket or hold.
func (b *Backend) key(upstream, name string) string {
	var s strings.Builder
	s.Grow(len(b.prefix) + len(upstream) + len(name) + 3)
	s.WriteString(b.prefix)
	s.WriteByte('{')
	s.WriteString(upstream)
	s.WriteString("}:")
	s.WriteString(name)
	return s.String()
}

// errNoRedis is the error of a Backend made with no client: the transport
// treats it as an outage and goes on under local limits.
var errNoRedis = errors.New("redisquota: no Redis client")
