package retrytest

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// Server is a provider on a loopback HTTP server (an [httptest.Server] on
// 127.0.0.1). It is safe for concurrent use.
//
// Its network faults are real, so net/http's own behaviour shows through: a
// client's [http.Transport] may itself resend an idempotent request (GET,
// HEAD, or one with an Idempotency-Key) once when a reused keep-alive
// connection is reset before any answer. Count on exact attempt numbers with
// resets only for other methods, or with keep-alives off.
type Server struct {
	// URL is the server's base URL, "http://127.0.0.1:port". Any path is
	// answered the same way.
	URL string

	c         *core
	srv       *httptest.Server
	closeOnce sync.Once
}

// NewServer starts a provider on 127.0.0.1 as cfg says. It panics if cfg
// does not validate (see [Config.Validate]). Close it when done.
func NewServer(cfg Config) *Server {
	c := newCore(cfg)
	c.done = make(chan struct{})
	s := &Server{c: c}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close ends any delays and holds in progress and shuts the server down,
// closing its connections. It is safe to call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.c.done) })
	s.srv.Close()
}

// Client returns an HTTP client for the server ([httptest.Server.Client]):
// Close also closes its idle connections, so a test leaks no goroutines.
// Wrap its Transport to test a retrying client.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// Stats returns what the server has seen so far.
func (s *Server) Stats() Stats { return s.c.stats() }

// Start is the provider's start by Config.Now: the origin of Arrivals and
// of Overload windows.
func (s *Server) Start() time.Time { return s.c.start }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Read the request as a real server does, so a client's body has gone
	// out in full before the answer comes back.
	body, _ := io.ReadAll(r.Body)
	a := s.c.arrive(r, body)
	ctx := r.Context()
	if !s.c.wait(ctx, a.delay) || (a.slot && !s.c.wait(ctx, a.hold)) {
		s.c.finish(a, 0)
		// Close the connection without an answer: the client has gone,
		// or the server is closing and must not send a made-up 200.
		panic(http.ErrAbortHandler)
	}
	if a.reset {
		s.c.finish(a, 0)
		reset(w)
		return
	}
	if a.stream != nil {
		s.c.finish(a, http.StatusOK)
		p := a.stream.plan(s.c.cfg.Family, a.n, a.req, a.truncate)
		a.streamPlan = &p
		s.serveStream(w, r, a)
		return
	}
	if a.success && s.c.cfg.Success != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if a.truncate {
			rec := httptest.NewRecorder()
			copyHeader(rec.Header(), a.header)
			s.c.cfg.Success.ServeHTTP(rec, r)
			s.c.finish(a, rec.Code)
			writeTruncated(w, rec.Code, rec.Header(), rec.Body.Bytes())
			return
		}
		copyHeader(w.Header(), a.header)
		sw := &statusWriter{ResponseWriter: w}
		s.c.cfg.Success.ServeHTTP(sw, r)
		s.c.finish(a, sw.statusCode())
		return
	}
	s.c.finish(a, a.status)
	if a.truncate {
		writeTruncated(w, a.status, a.header, []byte(a.body))
		return
	}
	copyHeader(w.Header(), a.header)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append([]string(nil), v...)
	}
}

// reset closes the connection with a TCP RST: SO_LINGER 0 discards what is
// unsent and resets instead of the orderly FIN, which is what a client sees
// when a proxy or load balancer drops it.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// writeTruncated declares the whole body's length, sends half of it and
// closes the connection, so the client's read fails part-way.
func writeTruncated(w http.ResponseWriter, status int, header http.Header, body []byte) {
	copyHeader(w.Header(), header)
	// An empty body is declared as one byte long, so it too comes up short.
	w.Header().Set("Content-Length", strconv.Itoa(max(len(body), 1)))
	w.WriteHeader(status)
	w.Write(body[:len(body)/2])
	rc := http.NewResponseController(w)
	rc.Flush()
	if conn, _, err := rc.Hijack(); err == nil {
		conn.Close()
	}
}

// statusWriter notes the status a Success handler answers with. Unwrap lets
// http.ResponseController reach the connection's Flush and Hijack.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming (SSE) handlers flush through the wrapper.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
