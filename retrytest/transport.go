package retrytest

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Transport is a provider that answers in-process, as an [http.RoundTripper]:
// put it in an [http.Client], or under a retrying transport, with no socket
// at all. It answers any URL. It is safe for concurrent use.
//
// Network faults become the errors net/http returns for them: a reset is a
// *net.OpError wrapping syscall.ECONNRESET ([errors.Is] works); a truncated
// body fails with io.ErrUnexpectedEOF after half its bytes; a client that
// gives up during a delay or capacity hold gets its context's error.
type Transport struct {
	c *core
}

// NewTransport returns a provider as cfg says. It panics if cfg does not
// validate (see [Config.Validate]).
func NewTransport(cfg Config) *Transport {
	return &Transport{c: newCore(cfg)}
}

// Stats returns what the transport has seen so far.
func (t *Transport) Stats() Stats { return t.c.stats() }

// Start is the provider's start by Config.Now: the origin of Arrivals and
// of Overload windows.
func (t *Transport) Start() time.Time { return t.c.start }

// RoundTrip answers req as the provider would. It reads and closes the
// request body, as a real transport does.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			// The request never reached the provider whole.
			return nil, err
		}
		body = b
	}
	a := t.c.arrive(req, body)
	ctx := req.Context()
	if !t.c.wait(ctx, a.delay) || (a.slot && !t.c.wait(ctx, a.hold)) {
		t.c.finish(a, 0)
		return nil, ctx.Err()
	}
	if a.reset {
		t.c.finish(a, 0)
		return nil, resetError(req)
	}
	if a.stream != nil {
		t.c.finish(a, http.StatusOK)
		p := a.stream.plan(t.c.cfg.Family, a.n, a.req, a.truncate)
		streamHeader(a.header)
		resp := &http.Response{
			Status: statusLine(http.StatusOK), StatusCode: http.StatusOK,
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: a.header, ContentLength: -1, Request: req,
			Body: newStreamBody(ctx, &p),
		}
		if req.Method == http.MethodHead {
			resp.Body = http.NoBody
		}
		return resp, nil
	}
	status, header, out := a.status, a.header, []byte(a.body)
	if a.success && t.c.cfg.Success != nil {
		rec := httptest.NewRecorder()
		copyHeader(rec.Header(), a.header)
		r := req.Clone(ctx)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		t.c.cfg.Success.ServeHTTP(rec, r)
		status, header, out = rec.Code, rec.Header().Clone(), rec.Body.Bytes()
	}
	t.c.finish(a, status)
	resp := &http.Response{
		Status:        statusLine(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		ContentLength: int64(len(out)),
		Request:       req,
	}
	switch {
	case req.Method == http.MethodHead:
		resp.Body = http.NoBody
	case a.truncate:
		resp.ContentLength = int64(max(len(out), 1))
		resp.Body = &truncatedBody{r: bytes.NewReader(out[:len(out)/2])}
	default:
		resp.Body = io.NopCloser(bytes.NewReader(out))
	}
	header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	return resp, nil
}

// statusLine is the Status net/http's client would report; for a code it
// does not know (529) the server side writes "status code 529".
func statusLine(code int) string {
	text := http.StatusText(code)
	if text == "" {
		text = "status code " + strconv.Itoa(code)
	}
	return strconv.Itoa(code) + " " + text
}

// resetError is the error a read from a connection reset by the peer
// returns.
func resetError(req *http.Request) error {
	return &net.OpError{
		Op:   "read",
		Net:  "tcp",
		Addr: tcpAddr(hostPort(req)),
		Err:  os.NewSyscallError("read", syscall.ECONNRESET),
	}
}

// hostPort is the request's host with the scheme's default port if none.
func hostPort(req *http.Request) string {
	host := req.URL.Host
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if req.URL.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(host, port)
}

// tcpAddr is the remote address of the imaginary connection.
type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

// truncatedBody yields its bytes and then io.ErrUnexpectedEOF, as net/http's
// body does when a connection closes before Content-Length bytes came.
type truncatedBody struct {
	r *bytes.Reader
}

func (b *truncatedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *truncatedBody) Close() error { return nil }
