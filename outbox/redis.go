package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps the outbox in Redis, so that many worker processes
// share it. Its keys, under a prefix (default "outbox"):
//
//	{prefix}:e:<id>    the entry, as JSON
//	{prefix}:due       a sorted set of pending entries' IDs by NextAt (ms)
//	{prefix}:stream    a stream of IDs of due entries, read by the
//	                   consumer group "workers": the work queue
//	{prefix}:s:<state> a sorted set of the IDs of the entries in each
//	                   state (pending, delivered, dead), for List
//	{prefix}:expiry    a sorted set of the IDs of delivered entries by
//	                   the time their DeliveredTTL ends: Put removes
//	                   them from the delivered set then
//
// (Entries saved before the state sets existed are listed once saved
// again.)
//
// Claim first moves the entries due at now from the sorted set to the
// stream (one Lua script, atomically), then takes messages with XAUTOCLAIM
// (those another consumer has held longer than the lease: it died) and
// XREADGROUP (new ones). A message read stays in the group's pending list,
// out of everyone else's reach, until Put acknowledges it, or until it
// has been idle longer than the lease: delivery is at least once, and no
// one else sends an entry while its lease runs. Redis measures the lease
// on its own clock (a message's idle time), not Options.Now.
//
// Each RedisStore is one consumer of the group, named after the host, the
// process and a random suffix. Durability is Redis's: Put returns once
// Redis has applied the write; run Redis with appendonly yes and
// appendfsync always (or everysec, accepting a second's loss on a crash of
// the Redis host) for the outbox to survive Redis restarts.
type RedisStore struct {
	rdb      redis.UniversalClient
	prefix   string
	consumer string
	// DeliveredTTL, if positive, makes delivered entries expire from
	// Redis that long after delivery. Zero keeps them.
	DeliveredTTL time.Duration
}

const redisGroup = "workers"

// NewRedisStore returns a store in rdb under prefix ("outbox" if empty),
// creating the stream and its consumer group if need be.
func NewRedisStore(ctx context.Context, rdb redis.UniversalClient, prefix string) (*RedisStore, error) {
	if prefix == "" {
		prefix = "outbox"
	}
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	s := &RedisStore{rdb: rdb, prefix: prefix,
		consumer: host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])}
	err := rdb.XGroupCreateMkStream(ctx, s.stream(), redisGroup, "0").Err()
	if err != nil && !isBusyGroup(err) {
		return nil, err
	}
	return s, nil
}

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}

func (s *RedisStore) key(id string) string        { return s.prefix + ":e:" + id }
func (s *RedisStore) due() string                 { return s.prefix + ":due" }
func (s *RedisStore) stream() string              { return s.prefix + ":stream" }
func (s *RedisStore) stateSet(state State) string { return s.prefix + ":s:" + string(state) }
func (s *RedisStore) expiry() string              { return s.prefix + ":expiry" }

// putScript saves an entry, schedules or unschedules it, moves it to its
// state's set, acknowledges and deletes its stream message, and drops
// from the delivered set (at most 100) entries whose DeliveredTTL ended,
// in one step.
// KEYS: entry, due, stream, s:pending, s:delivered, s:dead, expiry.
// ARGV: json, id, state, nextAt ms, message id or "", ttl ms or 0, group, now ms.
var putScript = redis.NewScript(`
if tonumber(ARGV[6]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[6])
  redis.call('ZADD', KEYS[7], tonumber(ARGV[8]) + tonumber(ARGV[6]), ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[7], ARGV[2])
end
if ARGV[3] == 'pending' then
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
else
  redis.call('ZREM', KEYS[2], ARGV[2])
end
local sets = {pending = KEYS[4], delivered = KEYS[5], dead = KEYS[6]}
for state, key in pairs(sets) do
  if state == ARGV[3] then
    redis.call('ZADD', key, 0, ARGV[2])
  else
    redis.call('ZREM', key, ARGV[2])
  end
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', ARGV[8], 'LIMIT', 0, 100)
for _, id in ipairs(gone) do
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[7], id)
end
if ARGV[5] ~= '' then
  redis.call('XACK', KEYS[3], ARGV[7], ARGV[5])
  redis.call('XDEL', KEYS[3], ARGV[5])
end
return 1`)

// promoteScript moves at most ARGV[2] entries due by ARGV[1] (ms) from the
// sorted set to the stream. KEYS: due, stream.
var promoteScript = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('XADD', KEYS[2], '*', 'id', id)
end
return #ids`)

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, e *Entry) error {
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	var ttl int64
	if e.State == Delivered && s.DeliveredTTL > 0 {
		ttl = max(s.DeliveredTTL.Milliseconds(), 1)
	}
	keys := []string{s.key(e.ID), s.due(), s.stream(), s.stateSet(Pending), s.stateSet(Delivered), s.stateSet(Dead), s.expiry()}
	err = putScript.Run(ctx, s.rdb, keys,
		string(v), e.ID, string(e.State), e.NextAt.UnixMilli(), e.Claim, ttl, redisGroup, time.Now().UnixMilli()).Err()
	if err != nil {
		return err
	}
	e.Claim = ""
	return nil
}

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, now time.Time, n int, lease time.Duration) ([]*Entry, error) {
	if err := promoteScript.Run(ctx, s.rdb, []string{s.due(), s.stream()}, now.UnixMilli(), n).Err(); err != nil {
		return nil, err
	}
	msgs, _, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.stream(), Group: redisGroup, Consumer: s.consumer, MinIdle: lease, Start: "0-0", Count: int64(n),
	}).Result()
	if err != nil {
		return nil, err
	}
	if len(msgs) < n {
		streams, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: redisGroup, Consumer: s.consumer, Streams: []string{s.stream(), ">"},
			Count: int64(n - len(msgs)), Block: -1,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for _, st := range streams {
			msgs = append(msgs, st.Messages...)
		}
	}
	out := make([]*Entry, 0, len(msgs))
	for _, m := range msgs {
		id, _ := m.Values["id"].(string)
		e, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) || err == nil && e.State != Pending {
			// Finished (or expired) meanwhile: nothing to send.
			s.rdb.XAck(ctx, s.stream(), redisGroup, m.ID)
			s.rdb.XDel(ctx, s.stream(), m.ID)
			continue
		}
		if err != nil {
			return out, err
		}
		e.Claim, e.NextAt = m.ID, now.Add(lease)
		out = append(out, e)
	}
	return out, nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, id string) (*Entry, error) {
	v, err := s.rdb.Get(ctx, s.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	e := new(Entry)
	return e, json.Unmarshal(v, e)
}

// List implements Store. Delivered entries whose DeliveredTTL has ended
// are not listed.
func (s *RedisStore) List(ctx context.Context, state State, after string, limit int) ([]*Entry, error) {
	var out []*Entry
	for len(out) < limit {
		from := "-"
		if after != "" {
			from = "(" + after
		}
		want := limit - len(out)
		ids, err := s.rdb.ZRangeByLex(ctx, s.stateSet(state), &redis.ZRangeBy{Min: from, Max: "+", Count: int64(want)}).Result()
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			break
		}
		keys := make([]string, len(ids))
		for i, id := range ids {
			keys[i] = s.key(id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // expired (DeliveredTTL) since it was listed
			}
			e := new(Entry)
			if err := json.Unmarshal([]byte(str), e); err != nil {
				return nil, err
			}
			if e.State == state {
				out = append(out, e)
			}
		}
		after = ids[len(ids)-1]
		if len(ids) < want {
			break
		}
	}
	return out, nil
}

// Close implements Store. It does not close the client, which is the
// caller's.
func (s *RedisStore) Close() error { return nil }

var _ Store = (*RedisStore)(nil)
