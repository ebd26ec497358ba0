package outbox

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server the test started on a loopback port, with
// no persistence (the approach of redisquota's tests).
type redisServer struct {
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server on a free loopback port and waits until
// it answers. CI installs redis-server (scripts/test.sh).
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not on PATH: the outbox's Redis tests run against a real Redis " +
			"(install it with: apt-get install -y redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &redisServer{port: l.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	l.Close()
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--loglevel", "warning")
	dieWithTest(s.cmd)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.kill)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("redis-server exited at start: %v", s.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer: %v", s.Addr(), err)
		}
	}
}

func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// kill ends the server at once (SIGKILL).
func (s *redisServer) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// redisStore is a RedisStore on srv, with a client of its own (one
// consumer of the group, as one worker process would be).
func redisStore(t testing.TB, srv *redisServer) *RedisStore {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	s, err := NewRedisStore(context.Background(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
