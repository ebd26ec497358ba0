// Package redisquota keeps retryhttp's shared quotas in Redis, so that many
// processes (the replicas of a service, a pool of workers) stay under one
// account's limits together.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
//	rt := retryhttp.New(nil,
//		retryhttp.WithRateLimit(retryhttp.Limits{RequestsPerMinute: 500, InputTokensPerMinute: 30_000}),
//		retryhttp.WithQuotaBackend(redisquota.New(rdb), 0.25), // one of four replicas
//	)
//
// A Backend implements retryhttp.QuotaBackend. Per upstream key it keeps one
// bucket per limit (requests, tokens, input tokens, output tokens) and the
// hold learned from the server (a 429's Retry-After, a quota the headers say
// is used up), so that one replica's 429 pauses every replica.
//
// # Algorithm
//
// Each bucket is a GCRA (generic cell rate algorithm: a token bucket kept as
// one number, its theoretical arrival time TAT, the time it will be full
// again). A booking of n units at time t on a bucket that refills one unit
// every interval and holds burst units is
//
//	tat   = max(TAT, t, hold) + n·interval
//	start = max(t, hold, tat − burst·interval)
//
// which is what golang.org/x/time/rate's Reserve computes, and what
// retryhttp's in-memory limits do: a booking always succeeds and says when
// the attempt may start, so requests are served first come, first served.
// One Lua script books all of a request's limits at once (the start is the
// latest of theirs) together with the hold, in one round trip, atomically;
// it is sent with EVALSHA (go-redis's Script, which falls back to EVAL after
// a restart has emptied the script cache).
//
// go-redis/redis_rate, the well-kept GCRA limiter for go-redis, was weighed
// and not used: it answers allow or deny, while retryhttp needs a
// reservation (book now, learn when to start) so that waiting requests keep
// their place instead of polling; it limits one key per call, while a
// request draws on up to four limits that must be booked together; and it
// keeps no hold.
//
// A request that could not start before its deadline (or the longest queue
// wait allowed) books nothing, so requests that give up do not push everyone
// else's turn back.
//
// A Backend also implements retryhttp.QuotaSettler: when a response reports
// the tokens it used, the booking is settled in Redis, by a second script
// that moves the bucket's TAT back by n·interval for n units given back
// (never before the server's now: a full bucket, whose key is deleted) or
// forth for n units charged. Later bookings, from any process, see it;
// requests already waiting keep the start they were given.
//
// # Time
//
// The script reads the Redis server's clock (TIME), never the callers':
// processes on different machines disagree about the time, and one bucket
// must be kept on one clock. What crosses the wire are durations: the script
// returns how long the attempt must wait from the moment it ran, and the
// transport counts that wait from the moment the answer reached it, on its
// own clock, so an attempt never leaves before its slot on the server's
// clock (at worst the reply's one-way latency after it). Hold likewise sends
// how long the hold lasts.
//
// # Keys
//
// Keys are prefix + "{" + upstream key + "}:" + name, where name is the
// limit's ("rpm", "tpm", "itpm", "otpm") or "hold"; the braces are a Redis
// Cluster hash tag, so one upstream's keys share a slot and one script can
// touch them all. Every write sets a TTL: a bucket's key expires when the
// bucket would be full again (an absent key reads as a full bucket, so
// nothing is lost), a hold's when it ends, plus a second's margin. Nothing
// grows without bound.
//
// # Failures
//
// A Backend returns Redis's errors as they are. The transport bounds each
// call with WithQuotaTimeout (50ms by default) and, when Redis errs or is
// slow, books the request on the local share of each limit given to
// WithQuotaBackend. After three failed calls in a row it logs the outage
// once and asks Redis again once a second until it answers. Configure the client with ContextTimeoutEnabled
// so that its reads give up at that deadline too, rather than at its own
// ReadTimeout (3s by default), which would keep a connection (though never
// the request) waiting on a stalled server.
package redisquota
