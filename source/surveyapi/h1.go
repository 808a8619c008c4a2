package surveyapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// h1 is the client's own HTTP/1.1 path for the GETs that carry the sync —
// response details and list pages — and the ping. net/http's transport
// hands every request to two goroutines per connection (one writes it, one
// reads the answer) and builds header maps both ways; against a fast
// service that costs more CPU than decoding the answer. h1 writes the
// request and reads the answer in the caller's goroutine, on a pooled
// keep-alive connection, keeping only the five headers the client looks
// at. Everything else goes through net/http: POSTs (their "was it sent?"
// tracing), file downloads (streamed), an injected http.Client, and any
// base URL that a proxy from the environment applies to.
//
// It speaks what RFC 9112 asks of a client for a GET: Content-Length,
// chunked (with trailers) and close-delimited bodies, 1xx answers skipped,
// "Connection: close" and HTTP/1.0 honoured, a keep-alive connection that
// the server closed while idle retried on another one (nothing was read:
// safe for a GET), limits on header size. Like net/http it asks for gzip
// and decompresses transparently (Content-Encoding: gzip). One deadline
// covers the attempt (dial, write, answer and body); a cancelled context
// expires it at once. No goroutine is started: a connection lives in the
// idle pool or in the hands of one caller.
type h1 struct {
	addr    string // host:port to dial
	host    string // Host header
	origin  string // scheme://host of the base URL: the request target is the rest
	tls     *tls.Config
	dialer  net.Dialer
	maxIdle int
	header  []byte // the fixed request headers, rendered once

	gzip  sync.Pool    // *gzip.Reader, reused across answers
	dials atomic.Int64 // connections opened (tests)

	mu   sync.Mutex
	idle []*h1Conn // LIFO: the most recently used is the most likely alive
}

type h1Conn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

const (
	h1IdleTimeout  = 90 * time.Second // as net/http's DefaultTransport
	h1MaxHeader    = 1 << 20          // response header bytes, as net/http
	h1ReadBufSize  = 16 << 10
	h1WriteBufSize = 4 << 10
)

// newH1 returns the HTTP/1.1 path for base, or nil when base must go
// through net/http (proxy, the transport's proxy function, applies to it).
func newH1(base *url.URL, header http.Header, maxIdle int, timeout time.Duration, proxy func(*http.Request) (*url.URL, error)) *h1 {
	if proxy != nil {
		if p, err := proxy(&http.Request{URL: base}); err != nil || p != nil {
			return nil
		}
	}
	port := base.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[base.Scheme]
	}
	h := &h1{
		addr:    net.JoinHostPort(base.Hostname(), port),
		host:    base.Host,
		origin:  base.Scheme + "://" + base.Host,
		dialer:  net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second},
		maxIdle: maxIdle,
	}
	if base.Scheme == "https" {
		h.tls = &tls.Config{ServerName: base.Hostname(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	var b bytes.Buffer
	for _, k := range []string{"X-API-TOKEN", "User-Agent", "Accept", "Content-Type"} {
		for _, v := range header[k] {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("Accept-Encoding: gzip\r\n\r\n")
	h.header = b.Bytes()
	return h
}

// target returns the request target of rawURL, or false when rawURL is not
// under the origin or holds a byte that must not appear in a request line
// (the caller then uses net/http, which escapes).
func (h *h1) target(rawURL string) (string, bool) {
	if len(rawURL) <= len(h.origin) || rawURL[:len(h.origin)] != h.origin || rawURL[len(h.origin)] != '/' {
		return "", false
	}
	t := rawURL[len(h.origin):]
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return "", false
		}
	}
	return t, true
}

// h1Answer is what the client uses of an answer.
type h1Answer struct {
	status                                       int
	contentType, requestID, retryAfter, location string
}

// errH1Stale: the connection turned out closed before any answer (on a
// reused one: the server closed it while idle).
var errH1Stale = errors.New("connection closed by the server before an answer")

// errBadEncoding: a body in a Content-Encoding that cannot be undone.
var errBadEncoding = errors.New("unsupported or corrupt Content-Encoding")

// get sends GET target and reads the answer's body into buf, at most
// bodyLimit(status) bytes. err is a failure to get an answer (status line and
// headers); bodyErr one while reading the body (errBodyTooLarge included).
func (h *h1) get(ctx context.Context, target string, timeout time.Duration, buf *bodyBuf) (a h1Answer, bodyErr, err error) {
	deadline := time.Now().Add(timeout)
	for {
		cn, reused, err := h.conn(ctx, deadline)
		if err != nil {
			return a, nil, err
		}
		a, bodyErr, keep, err := h.roundTrip(ctx, cn, target, deadline, buf)
		if err != nil && reused && errors.Is(err, errH1Stale) && ctx.Err() == nil {
			// The server had closed it while idle: again, on the next idle
			// one or a new one. Each turn drops one idle connection, so
			// this ends at the latest with a dialled connection.
			cn.nc.Close()
			continue
		}
		if err != nil || !keep {
			cn.nc.Close()
		} else {
			h.put(cn)
		}
		return a, bodyErr, err
	}
}

// conn takes an idle connection or dials a new one.
func (h *h1) conn(ctx context.Context, deadline time.Time) (cn *h1Conn, reused bool, err error) {
	now := time.Now()
	h.mu.Lock()
	for len(h.idle) > 0 {
		cn = h.idle[len(h.idle)-1]
		h.idle = h.idle[:len(h.idle)-1]
		// Bytes read past the last answer belong to no request: the
		// connection is out of step and must not be used.
		if now.Sub(cn.lastUsed) < h1IdleTimeout && cn.br.Buffered() == 0 {
			h.mu.Unlock()
			return cn, true, nil
		}
		cn.nc.Close()
	}
	h.mu.Unlock()

	h.dials.Add(1)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var nc net.Conn
	if h.tls != nil {
		d := tls.Dialer{NetDialer: &h.dialer, Config: h.tls}
		nc, err = d.DialContext(dctx, "tcp", h.addr)
	} else {
		nc, err = h.dialer.DialContext(dctx, "tcp", h.addr)
	}
	if err != nil {
		return nil, false, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, h1ReadBufSize), bw: bufio.NewWriterSize(nc, h1WriteBufSize)}, false, nil
}

func (h *h1) put(cn *h1Conn) {
	cn.lastUsed = time.Now()
	h.mu.Lock()
	if len(h.idle) >= h.maxIdle {
		h.mu.Unlock()
		cn.nc.Close()
		return
	}
	h.idle = append(h.idle, cn)
	h.mu.Unlock()
}

// closeIdle closes the idle connections and keeps the pool open.
func (h *h1) closeIdle() {
	h.mu.Lock()
	idle := h.idle
	h.idle = nil
	h.mu.Unlock()
	for _, cn := range idle {
		cn.nc.Close()
	}
}

// aLongTimeAgo expires a connection's deadline at once.
var aLongTimeAgo = time.Unix(1, 0)

func (h *h1) roundTrip(ctx context.Context, cn *h1Conn, target string, deadline time.Time, buf *bodyBuf) (a h1Answer, bodyErr error, keep bool, err error) {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return a, nil, false, err
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(aLongTimeAgo) })
		defer func() {
			if !stop() { // the context ended: the connection may be mid-answer
				keep = false
				if err == nil && bodyErr != nil {
					bodyErr = ctx.Err()
				}
			}
		}()
	}

	bw := cn.bw
	bw.WriteString("GET ")
	bw.WriteString(target)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(h.host)
	bw.WriteString("\r\n")
	bw.Write(h.header)
	if err := bw.Flush(); err != nil {
		return a, nil, false, stale(err)
	}

	var connClose, chunked bool
	var length int64
	var encoding string
	for {
		a, length, chunked, encoding, connClose, err = readHead(cn.br)
		if err != nil {
			return a, nil, false, err
		}
		if a.status >= 200 || a.status == http.StatusSwitchingProtocols {
			break
		}
		// 1xx: informational, the answer follows.
	}
	if a.status == http.StatusSwitchingProtocols {
		return a, nil, false, errors.New("unexpected 101 Switching Protocols")
	}

	buf.b = buf.b[:0]
	lim := bodyLimit(a.status)
	if a.status == http.StatusNoContent || a.status == http.StatusNotModified {
		return a, nil, !connClose, nil
	}
	if encoding == "" {
		bodyErr, connClose = readFramed(cn.br, buf, length, chunked, connClose, lim)
		return a, bodyErr, bodyErr == nil && !connClose, nil
	}
	// gzip: the framed (compressed) body first, then inflated into buf.
	zbuf := getBuf()
	defer putBuf(zbuf)
	bodyErr, connClose = readFramed(cn.br, zbuf, length, chunked, connClose, lim)
	switch {
	case bodyErr != nil:
	case encoding == "gzip" || encoding == "x-gzip":
		bodyErr = h.gunzip(buf, zbuf.b, lim)
	default: // only gzip was asked for: the body is unusable, asking again gets the same
		bodyErr = fmt.Errorf("%w %q (only gzip was asked for)", errBadEncoding, snippet([]byte(encoding)))
		buf.b = append(buf.b, zbuf.b[:min(len(zbuf.b), maxErrorBody)]...) // an error body keeps its message
	}
	return a, bodyErr, !connClose, nil
}

// readFramed reads a body framed as the headers said into buf, at most lim
// bytes; connClose reports that the connection cannot carry another answer.
func readFramed(br *bufio.Reader, buf *bodyBuf, length int64, chunked, connClose bool, lim int) (bodyErr error, _ bool) {
	switch {
	case chunked:
		bodyErr = readBody(buf, httputil.NewChunkedReader(br), -1, lim)
		if bodyErr == nil {
			bodyErr = skipTrailers(br)
		}
	case length > int64(lim):
		return readBody(buf, io.LimitReader(br, int64(lim)+1), -1, lim), true
	case length >= 0:
		bodyErr = readBody(buf, io.LimitReader(br, length), length, lim)
		if bodyErr == nil && int64(len(buf.b)) < length {
			bodyErr = io.ErrUnexpectedEOF
		}
	default: // delimited by the end of the connection
		return readBody(buf, br, -1, lim), true
	}
	return bodyErr, connClose || bodyErr != nil
}

// gunzip inflates z into buf, at most lim bytes.
func (h *h1) gunzip(buf *bodyBuf, z []byte, lim int) error {
	zr, _ := h.gzip.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(z))
	} else {
		err = zr.Reset(bytes.NewReader(z))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errBadEncoding, err)
	}
	defer h.gzip.Put(zr)
	if err := readBody(buf, zr, -1, lim); err != nil {
		if errors.Is(err, errBodyTooLarge) {
			return err
		}
		return fmt.Errorf("%w: %w", errBadEncoding, err)
	}
	return nil
}

// stale marks the errors by which a reused connection shows that the
// server closed it while it was idle.
func stale(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", errH1Stale, err)
	}
	return err
}

// readHead reads a status line and the headers. length is -1 when not sent.
// encoding is the Content-Encoding, lower case; "" for identity.
func readHead(br *bufio.Reader) (a h1Answer, length int64, chunked bool, encoding string, connClose bool, err error) {
	length = -1
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 {
			return a, 0, false, "", false, stale(err)
		}
		return a, 0, false, "", false, fmt.Errorf("reading the status line: %w", err)
	}
	// HTTP/1.x SP 3DIGIT [SP reason] CRLF
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' || (len(line) > 12 && line[12] != ' ' && line[12] != '\r' && line[12] != '\n') {
		return a, 0, false, "", false, fmt.Errorf("malformed HTTP status line %q", snippet(line))
	}
	minor := line[7]
	code, cerr := strconv.Atoi(string(line[9:12]))
	if cerr != nil || code < 100 || code > 999 || (minor != '0' && minor != '1') {
		return a, 0, false, "", false, fmt.Errorf("malformed HTTP status line %q", snippet(line))
	}
	a.status = code
	connClose = minor == '0'
	total := len(line)
	sawLength := false
	for {
		line, err = br.ReadSlice('\n')
		total += len(line)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = errors.New("a response header line is too long")
			}
			return a, 0, false, "", false, fmt.Errorf("reading the response headers: %w", err)
		}
		if total > h1MaxHeader {
			return a, 0, false, "", false, fmt.Errorf("response headers larger than %d bytes", h1MaxHeader)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(k) == 0 {
			if line[0] == ' ' || line[0] == '\t' {
				continue // obsolete line folding: a continuation of a header we do not read
			}
			return a, 0, false, "", false, fmt.Errorf("malformed response header line %q", snippet(line))
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, perr := strconv.ParseInt(string(v), 10, 64)
			if perr != nil || n < 0 || (sawLength && n != length) {
				return a, 0, false, "", false, fmt.Errorf("invalid Content-Length %q", snippet(v))
			}
			length, sawLength = n, true
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(v, []byte("chunked")) {
				return a, 0, false, "", false, fmt.Errorf("unsupported Transfer-Encoding %q", snippet(v))
			}
			chunked = true
		case bytes.EqualFold(k, []byte("Connection")):
			for _, t := range bytes.Split(v, []byte{','}) {
				switch t = bytes.TrimSpace(t); {
				case bytes.EqualFold(t, []byte("close")):
					connClose = true
				case bytes.EqualFold(t, []byte("keep-alive")) && minor == '0':
					connClose = false
				}
			}
		case bytes.EqualFold(k, []byte("Content-Encoding")):
			if len(v) > 0 && !bytes.EqualFold(v, []byte("identity")) {
				encoding = strings.ToLower(string(v))
			}
		case bytes.EqualFold(k, []byte("Content-Type")):
			a.contentType = string(v)
		case bytes.EqualFold(k, []byte("X-Request-Id")):
			a.requestID = string(v)
		case bytes.EqualFold(k, []byte("Retry-After")):
			a.retryAfter = string(v)
		case bytes.EqualFold(k, []byte("Location")):
			a.location = string(v)
		}
	}
	if chunked {
		length = -1 // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3)
	}
	return a, length, chunked, encoding, connClose, nil
}

// skipTrailers reads the trailer section after the last chunk.
func skipTrailers(br *bufio.Reader) error {
	for total := 0; ; {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if err != nil {
			return fmt.Errorf("reading the trailers: %w", err)
		}
		if total > h1MaxHeader {
			return errors.New("trailers too large")
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}
