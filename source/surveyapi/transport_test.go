package surveyapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer answers GETs with bytes written by hand, to put the client's
// transport through what net/http's server would never send.
type rawServer struct {
	ln     net.Listener
	conns  atomic.Int64 // accepted
	active atomic.Int64 // accepted and not yet closed
	n      atomic.Int64 // requests read
	mu     sync.Mutex
	open   []net.Conn
	reqs   []*http.Request
	wg     sync.WaitGroup
}

// newRawServer calls answer for every request read (n counts from 1 over
// all connections); answer writes the raw answer and reports whether to
// keep the connection open for another request.
func newRawServer(t *testing.T, answer func(n int64, req *http.Request, w *bufio.Writer) (keep bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.active.Add(1)
			s.mu.Lock()
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer s.active.Add(-1)
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					s.mu.Lock()
					s.reqs = append(s.reqs, req)
					s.mu.Unlock()
					keep := answer(s.n.Add(1), req, bw)
					if bw.Flush() != nil || !keep {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.closeAll()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) URL() string { return "http://" + s.ln.Addr().String() }

// closeAll closes every connection the server holds (as a server's idle
// timeout would).
func (s *rawServer) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.open {
		c.Close()
	}
	s.open = nil
}

func withLength(status string, body []byte, headers ...string) string {
	return "HTTP/1.1 " + status + "\r\nContent-Type: application/json\r\n" + strings.Join(headers, "") +
		fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + string(body)
}

func chunked(body []byte, size int) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\nX-Trailer: yes\r\n\r\n")
	return b.String()
}

func gz(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func getOK(t *testing.T, h *harness) {
	t.Helper()
	r, err := h.c.GetResponse(context.Background(), 4574, testRID)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.ResponseID) != testRID || countAnswers(r) != 40 {
		t.Fatalf("decoded %q with %d answers", r.ResponseID, countAnswers(r))
	}
}

func TestTransportKeepAliveAndRequestBytes(t *testing.T) {
	body := responseJSON(testRID)
	s := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		w.WriteString(withLength("200 OK", body, "X-Request-Id: hdr-1\r\n"))
		return true
	})
	h := newClient(t, s.URL(), nil)
	for range 20 {
		getOK(t, h)
	}
	if got := s.conns.Load(); got != 1 {
		t.Errorf("20 sequential GETs used %d connections, want 1 (keep-alive)", got)
	}
	r := s.reqs[0]
	if r.Method != "GET" || r.RequestURI != "/v1/surveys/4574/responses/"+testRID || r.Proto != "HTTP/1.1" {
		t.Errorf("request line %s %s %s", r.Method, r.RequestURI, r.Proto)
	}
	if r.Host != s.ln.Addr().String() {
		t.Errorf("Host = %q", r.Host)
	}
	want := map[string]string{"X-Api-Token": testToken, "User-Agent": testUA, "Accept": "application/json",
		"Content-Type": "application/json", "Accept-Encoding": "gzip"}
	for k, v := range want {
		if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if len(r.Header) != len(want) {
		t.Errorf("headers %v, want exactly %v", r.Header, want)
	}
}

func TestTransportFramings(t *testing.T) {
	body := responseJSON(testRID)
	cases := []struct {
		name      string
		answer    string
		keep      bool
		wantConns int64 // for 3 GETs
	}{
		{"content-length", withLength("200 OK", body), true, 1},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 1000), true, 1},
		{"chunked overrides content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 4096), true, 1},
		{"1xx before the answer", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + withLength("200 OK", body), true, 1},
		{"close-delimited HTTP/1.0", "HTTP/1.0 200 OK\r\n\r\n" + string(body), false, 3},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n" + withLength("200 OK", body)[len("HTTP/1.1 200 OK\r\n"):], true, 1},
		{"Connection: close", withLength("200 OK", body, "Connection: close\r\n"), false, 3},
		{"gzip, content-length", withLength("200 OK", gz(t, body), "Content-Encoding: gzip\r\n"), true, 1},
		{"gzip, chunked", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(gz(t, body), 100), true, 1},
		{"header folding", "HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\n" + withLength("200 OK", body)[len("HTTP/1.1 200 OK\r\n"):], true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
				w.WriteString(tc.answer)
				return tc.keep
			})
			h := newClient(t, s.URL(), nil)
			for range 3 {
				getOK(t, h)
			}
			if got := s.conns.Load(); got != tc.wantConns {
				t.Errorf("3 GETs used %d connections, want %d", got, tc.wantConns)
			}
			if n := h.c.Count(OpGetResponse, OutcomeOK); n != 3 {
				t.Errorf("ok count %d, want 3 (%+v)", n, h.c.Stats().Requests)
			}
		})
	}
}

// A keep-alive connection the server closed while it sat idle is not an
// error: the GET goes again on another connection, and nothing is counted
// as a failure — also when every pooled connection went stale.
func TestTransportStaleIdleConnections(t *testing.T) {
	body := responseJSON(testRID)
	release := make(chan struct{})
	var gate atomic.Bool
	gate.Store(true)
	s := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		if gate.Load() {
			<-release // hold the first four so that four connections open
		}
		w.WriteString(withLength("200 OK", body))
		return true
	})
	h := newClient(t, s.URL(), func(o *Options) { o.MaxConcurrency = 4 })
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { getOK(t, h) })
	}
	for s.n.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	gate.Store(false)
	close(release)
	wg.Wait()
	if got := s.conns.Load(); got != 4 {
		t.Fatalf("%d connections, want 4", got)
	}
	s.closeAll() // the server's idle timeout, on all of them
	time.Sleep(20 * time.Millisecond)
	getOK(t, h)
	getOK(t, h)
	if got := s.conns.Load(); got != 5 {
		t.Errorf("%d connections after the stale ones, want 5", got)
	}
	if n := h.c.Count(OpGetResponse, OutcomeNetwork); n != 0 {
		t.Errorf("%d network failures counted for stale idle connections, want 0", n)
	}
	if n := h.c.Count(OpGetResponse, OutcomeOK); n != 6 {
		t.Errorf("ok count %d, want 6", n)
	}
}

func TestTransportBadAnswers(t *testing.T) {
	body := responseJSON(testRID)
	cases := []struct {
		name, answer string
		want         error  // errors.Is
		msg          string // in the error
		requests     int64  // how many the server saw (retried or not)
	}{
		{"garbage status line", "SSH-2.0-OpenSSH\r\n\r\n", ErrNetwork, "malformed HTTP response", 4},
		{"status out of range", "HTTP/1.1 99 Low\r\n\r\n", ErrNetwork, "malformed HTTP status code", 4},
		{"header without colon", "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", ErrNetwork, "malformed MIME header", 4},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", ErrNetwork, "multiple Content-Length", 4},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ErrNetwork, "bad Content-Length", 4},
		{"other transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrNetwork, "unsupported transfer encoding", 4},
		{"body shorter than its length", "HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n" + string(body[:100]), ErrNetwork, "body cut short", 4},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ErrNetwork, "body cut short", 4},
		{"corrupt gzip", withLength("200 OK", []byte("not gzip at all"), "Content-Encoding: gzip\r\n"), ErrMalformed, "Content-Encoding", 1},
		{"encoding not asked for", withLength("200 OK", body, "Content-Encoding: br\r\n"), ErrMalformed, `"br"`, 1},
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", ErrMalformed, "101", 1},
		{"headers too long", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 1100<<10) + "\r\n\r\n", ErrNetwork, "headers exceeded", 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
				w.WriteString(tc.answer)
				return false
			})
			h := newClient(t, s.URL(), nil)
			_, err := h.c.GetResponse(context.Background(), 4574, testRID)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v quoting %q", err, tc.want, tc.msg)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Fatal("the error quotes the token")
			}
			if got := s.n.Load(); got != tc.requests {
				t.Errorf("server saw %d requests, want %d", got, tc.requests)
			}
		})
	}
}

func TestTransportErrorBodyGzip(t *testing.T) {
	s := newRawServer(t, func(_ int64, _ *http.Request, w *bufio.Writer) bool {
		w.WriteString(withLength("403 Forbidden", gz(t, []byte(errorBody("req-For", 403, "no access to survey 4574"))), "Content-Encoding: gzip\r\n"))
		return true
	})
	h := newClient(t, s.URL(), nil)
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	checkAPIError(t, err, 403, ErrForbidden, true)
	if !strings.Contains(err.Error(), "no access to survey 4574") {
		t.Errorf("error %v", err)
	}
}

func TestTransportCancelMidBody(t *testing.T) {
	body := responseJSON(testRID)
	hold := make(chan struct{})
	s := newRawServer(t, func(_ int64, req *http.Request, w *bufio.Writer) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		w.Write(body[:200])
		w.Flush()
		<-hold // the rest never comes
		return false
	})
	t.Cleanup(func() { close(hold) }) // before the server's cleanup waits for its handlers
	h := newClient(t, s.URL(), func(o *Options) { o.Timeout = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := h.c.GetResponse(ctx, 4574, testRID)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the caller's deadline", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("returned after %s, want right after the context ended", d)
	}
	if n := h.c.Count(OpGetResponse, OutcomeCanceled); n != 1 {
		t.Errorf("canceled count %d (%+v)", n, h.c.Stats().Requests)
	}
}

func TestTransportAttemptTimeout(t *testing.T) {
	hold := make(chan struct{})
	s := newRawServer(t, func(n int64, _ *http.Request, w *bufio.Writer) bool {
		if n == 1 {
			w.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
			w.Flush()
			<-hold
			return false
		}
		w.WriteString(withLength("200 OK", responseJSON(testRID)))
		return true
	})
	t.Cleanup(func() { close(hold) })
	h := newClient(t, s.URL(), func(o *Options) { o.Timeout = 150 * time.Millisecond })
	getOK(t, h)
	if n := h.c.Count(OpGetResponse, OutcomeTimeout); n != 1 {
		t.Errorf("timeout count %d, want 1 (%+v)", n, h.c.Stats().Requests)
	}
}

func TestTransportTLS(t *testing.T) {
	body := responseJSON(testRID)
	var protos sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		w.Write(body)
	}))
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h := newClient(t, srv.URL, nil)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	h.c.transport.TLSClientConfig.RootCAs = pool
	getOK(t, h)
	getOK(t, h)
	if got := conns.Load(); got != 1 {
		t.Errorf("%d TLS connections for two GETs, want 1", got)
	}
	if _, ok := protos.Load("HTTP/2.0"); !ok {
		t.Errorf("protocols seen: want HTTP/2.0 (ALPN over TLS)")
	}

	// An untrusted certificate is a network error naming it, and the token stays out.
	h2 := newClient(t, srv.URL, func(o *Options) { o.MaxRetries = -1 })
	_, err := h2.c.GetResponse(context.Background(), 4574, testRID)
	if !errors.Is(err, ErrNetwork) || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), testToken) {
		t.Fatalf("untrusted certificate: %v", err)
	}
}

// The transport keeps no more connections than the concurrency cap (it
// may dial a few more under load, racing a dial against a connection being
// returned, but closes what its idle pool cannot hold), and every GET's
// answer is read whole before its connection is reused.
func TestTransportConcurrentCallers(t *testing.T) {
	body := responseJSON(testRID)
	s := newRawServer(t, func(n int64, _ *http.Request, w *bufio.Writer) bool {
		if n%3 == 0 {
			w.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 333))
		} else {
			w.WriteString(withLength("200 OK", body))
		}
		return true
	})
	h := newClient(t, s.URL(), func(o *Options) { o.MaxConcurrency = 8 })
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				getOK(t, h)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for s.active.Load() > 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.active.Load(); got > 8 {
		t.Errorf("%d connections kept open (%d dialled), want at most 8 (the concurrency cap)", got, s.conns.Load())
	}
}

// net/http quotes what the service sent in its errors (a bad status line,
// header, length or encoding): a service that echoes the token there must
// not get it into an error, a log line or a metric.
func TestTransportTokenNeverLeaks(t *testing.T) {
	answers := []string{
		"HTTP/1.1 2" + testToken + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\n" + testToken + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: " + testToken + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + testToken + "\r\n\r\n",
		withLength("200 OK", []byte("{}"), "Content-Encoding: "+testToken+"\r\n"),
		withLength("200 OK", []byte("<html>"+testToken+"</html>"), "X-Request-Id: "+testToken+"\r\n", "Content-Type: text/html\r\n"),
		withLength("503 Busy", []byte("<html>"+testToken+"</html>"), "X-Request-Id: "+testToken+"\r\n", "Retry-After: "+testToken+"\r\n"),
		withLength("302 Found", nil, "Location: http://127.0.0.2:1/?t="+testToken+"\r\n"),
		"HTTP/1.1 200 OK\r\nX-Big: " + testToken + strings.Repeat("a", 20<<10) + "\r\n\r\n",
	}
	s := newRawServer(t, func(n int64, _ *http.Request, w *bufio.Writer) bool {
		w.WriteString(answers[int(n-1)%len(answers)])
		return false
	})
	h := newClient(t, s.URL(), func(o *Options) { o.MaxRetries = -1 })
	var all strings.Builder
	for i := range answers {
		_, err := h.c.GetResponse(context.Background(), 4574, testRID)
		if err == nil {
			t.Fatalf("answer %d: no error", i)
		}
		fmt.Fprintf(&all, "%v\n%+v\n%#v\n", err, err, err)
	}
	all.WriteString(h.logs.String())
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		all.WriteString(mf.String())
	}
	fmt.Fprintf(&all, "%+v", h.c.Stats())
	for _, line := range strings.Split(all.String(), "\n") {
		if strings.Contains(line, testToken) {
			t.Errorf("token leaked: %.300s", line)
		}
	}
	if !strings.Contains(all.String(), "[redacted]") {
		t.Error("no [redacted] in the errors: the paths were not taken")
	}
}
