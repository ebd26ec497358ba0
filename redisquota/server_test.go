package redisquota

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain runs the helper process of TestThreeProcessesShareOneLimit when
// the test binary is started as one; otherwise the tests.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

// redisServer is a redis-server the test started on a loopback port, with
// no persistence: each test gets an empty Redis of its own.
type redisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startRedis starts redis-server on a free loopback port and waits until it
// answers. The tests need a real Redis: CI installs redis-server.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	s := &redisServer{t: t, port: freePort(t)}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// start starts the server on its port (again, after kill).
func (s *redisServer) start() {
	t := s.t
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not on PATH: the redisquota tests run against a real Redis " +
			"(install it with: apt-get install -y redis-server)")
	}
	s.cmd = exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--loglevel", "warning")
	dieWithTest(s.cmd)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	done := make(chan struct{})
	s.done = done
	go func(cmd *exec.Cmd) {
		cmd.Wait()
		close(done)
	}(s.cmd)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("redis-server exited at start: %v", s.cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer: %v", s.Addr(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill ends the server at once, as a crash would (SIGKILL).
func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func (s *redisServer) stop() { s.kill() }

// client returns a go-redis client of the server, closed with the test.
func (s *redisServer) client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// freePort returns a loopback TCP port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
