package surveyapi

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/logonce"
	"github.com/surveysync/surveysync/internal/permanent"
)

// Defaults applied by New to zero Options fields; they are the api.*
// defaults of the configuration.
const (
	DefaultMaxConcurrency    = 8
	DefaultTimeout           = 30 * time.Second
	DefaultMaxRetries        = 6
	DefaultRetryInitial      = 250 * time.Millisecond
	DefaultRetryMax          = 30 * time.Second
	DefaultQuotaPause        = 15 * time.Minute
	DefaultAuthProbeInterval = time.Minute
	// MaxRetryAfter clamps a Retry-After the service sends.
	MaxRetryAfter = 15 * time.Minute
)

// Options configure a Client. Zero values take the Default* constants.
type Options struct {
	BaseURL        string                // must end in /v1, e.g. https://api.click4survey.com/v1
	Token          string                // sent as X-API-TOKEN; never printed, logged or put in an error
	UserAgent      string                // "<app_name> (<contact_email>)"
	MaxConcurrency int                   // cap on in-flight requests, process-wide; 0 = DefaultMaxConcurrency
	RateLimit      float64               // requests/s over all calls, 0 = unlimited; token bucket with burst 1
	Timeout        time.Duration         // per attempt, until the body is read (downloads: until headers, then per stalled Read)
	MaxRetries     int                   // retries after the first attempt; 0 = DefaultMaxRetries, < 0 = none
	RetryInitial   time.Duration         // first backoff ceiling, doubled per retry
	RetryMax       time.Duration         // backoff ceiling
	QuotaPause     time.Duration         // how long every call waits after a 402
	HTTPClient     *http.Client          // optional; copied, redirects are refused. Leave its Timeout 0: it would cut downloads
	MaxBody        int64                 // most bytes of one JSON body (detail, list page); 0 = DefaultMaxBody; bigger is refused, permanently
	BodyBudget     int64                 // most bytes of JSON bodies held by all requests at once; 0 = DefaultBodyBudget
	Logger         *slog.Logger          // optional; nil logs nothing
	Registerer     prometheus.Registerer // optional; metrics are registered here

	// AuthProbeInterval is how often, while the token is rejected (401), one
	// call is let through to check whether it was fixed. Default and
	// recommended: one minute; tests shorten it.
	AuthProbeInterval time.Duration
	// PingSurveyID is the survey Ping lists with per_page=1; 0 asks for
	// survey 0, whose 404 proves the token valid just as well.
	PingSurveyID int64
}

// String prints the options with the token masked, so that logging them is safe.
func (o Options) String() string {
	tok := ""
	if o.Token != "" {
		tok = "***"
	}
	return fmt.Sprintf("surveyapi.Options{BaseURL:%q Token:%s UserAgent:%q MaxConcurrency:%d RateLimit:%g Timeout:%s MaxRetries:%d RetryInitial:%s RetryMax:%s QuotaPause:%s AuthProbeInterval:%s PingSurveyID:%d MaxBody:%d BodyBudget:%d}",
		o.BaseURL, tok, o.UserAgent, o.MaxConcurrency, o.RateLimit, o.Timeout, o.MaxRetries, o.RetryInitial, o.RetryMax, o.QuotaPause, o.AuthProbeInterval, o.PingSurveyID,
		o.MaxBody, o.BodyBudget)
}

// GoString masks the token for %#v too.
func (o Options) GoString() string { return o.String() }

// LogValue masks the token for log/slog.
func (o Options) LogValue() slog.Value { return slog.StringValue(o.String()) }

// Client calls the survey service's v1 API. It is safe for concurrent use,
// and meant to be shared by every caller in the process: the limits, the
// 429 gate, the 402 pause and the 401 stop are the client's, not a call's.
type Client struct {
	names      sync.Pool // of *interner: the details' repeated strings (fastdecode.go)
	base       string
	token      string
	header     http.Header
	hc         *http.Client
	transport  *http.Transport // ours, when no HTTPClient was given; closed by Close
	log        *slog.Logger
	failLog    *logonce.Limiter // failed calls: one line per cause and back-off step
	m          *metrics
	conc       *adaptiveLimit
	rate       *rate.Limiter // nil: unlimited
	gate       *gate
	timeout    time.Duration
	maxRetries int
	retry      backoff.Policy
	pingSurvey int64
	budget     *budget // bytes of JSON bodies held by requests in flight
}

// New checks o and builds a Client. Errors never quote the token.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("surveyapi: base URL %q: want http(s)://host/.../v1", o.BaseURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("surveyapi: base URL %q: no credentials, query or fragment allowed", u.Redacted())
	}
	base := strings.TrimRight(o.BaseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		return nil, fmt.Errorf("surveyapi: base URL %q must end in /v1", o.BaseURL)
	}
	if o.Token == "" {
		return nil, errors.New("surveyapi: API token is empty")
	}
	if !validHeaderValue(o.Token, false) {
		return nil, errors.New("surveyapi: API token contains spaces or control characters")
	}
	if strings.TrimSpace(o.UserAgent) == "" || !validHeaderValue(o.UserAgent, true) {
		return nil, fmt.Errorf("surveyapi: user agent %q: want \"<app_name> (<contact_email>)\"", o.UserAgent)
	}
	if o.RateLimit < 0 {
		return nil, fmt.Errorf("surveyapi: rate limit %g: must be >= 0", o.RateLimit)
	}
	if o.MaxConcurrency < 0 {
		return nil, fmt.Errorf("surveyapi: max concurrency %d: must be >= 0", o.MaxConcurrency)
	}
	if o.MaxBody < 0 || o.BodyBudget < 0 {
		return nil, fmt.Errorf("surveyapi: max body %d, body budget %d: must be >= 0", o.MaxBody, o.BodyBudget)
	}
	o.setDefaults()
	bg, err := newBudget(o.BodyBudget, o.MaxBody, o.MaxConcurrency)
	if err != nil {
		return nil, err
	}
	conc := newAdaptiveLimit(o.MaxConcurrency)
	m, err := newMetrics(o.Registerer, conc.snapshot)
	if err != nil {
		return nil, fmt.Errorf("surveyapi: registering metrics: %w", err)
	}
	c := &Client{
		base:       base,
		token:      o.Token,
		log:        o.Logger,
		m:          m,
		timeout:    o.Timeout,
		maxRetries: o.MaxRetries,
		retry:      backoff.Policy{Initial: o.RetryInitial, Max: o.RetryMax},
		pingSurvey: o.PingSurveyID,
		budget:     bg,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.failLog = logonce.New(c.log, time.Second, 5*time.Minute, nil)
	// The exact spellings of docs/api.md §1; Go writes header keys as given.
	c.header = http.Header{
		"X-API-TOKEN":  {o.Token},
		"User-Agent":   {o.UserAgent},
		"Accept":       {"application/json"},
		"Content-Type": {"application/json"},
	}
	if o.HTTPClient != nil {
		hc := *o.HTTPClient
		c.hc = &hc
	} else {
		// DefaultTransport's settings (proxy from the environment, dial and
		// TLS handshake timeouts, keep-alive, HTTP/2 over TLS, gzip asked
		// for and inflated), with as many idle connections kept as
		// requests may be in flight, so that none is closed and redialled
		// between calls.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = o.MaxConcurrency
		t.MaxConnsPerHost = 0              // a download streams without a slot: it must not wait for a connection
		t.MaxResponseHeaderBytes = 1 << 20 // a hostile header block costs at most 1 MiB
		c.transport = t
		c.hc = &http.Client{Transport: t}
	}
	// Never follow a redirect: it would carry X-API-TOKEN to wherever it points.
	c.hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if o.RateLimit > 0 {
		c.rate = rate.NewLimiter(rate.Limit(o.RateLimit), 1)
	}
	c.conc = conc
	c.gate = newGate(o.QuotaPause, o.AuthProbeInterval, func(mode int) {
		m.paused.Set(b2f(mode != modeOpen))
		m.authFailed.Set(b2f(mode == modeUnauthorized))
	})
	return c, nil
}

// setDefaults gives zero fields their Default* value (New has refused
// negative sizes and counts; a negative MaxRetries means none).
func (o *Options) setDefaults() {
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.BodyBudget == 0 {
		o.BodyBudget = DefaultBodyBudget
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Timeout, DefaultTimeout)
	def(&o.RetryInitial, DefaultRetryInitial)
	def(&o.RetryMax, DefaultRetryMax)
	def(&o.QuotaPause, DefaultQuotaPause)
	def(&o.AuthProbeInterval, DefaultAuthProbeInterval)
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = o.RetryInitial
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = DefaultMaxRetries
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
}

// Close releases idle connections of the client's own transport (an
// injected Options.HTTPClient is the caller's to close). In-flight calls are
// not affected; the client stays usable.
func (c *Client) Close() {
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func validHeaderValue(s string, spaces bool) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b < 0x20 || b == 0x7f || (!spaces && b == ' ') {
			return false
		}
	}
	return true
}

// request is one operation as do sends it.
type request struct {
	op     string
	method string
	url    string
	body   []byte // JSON body of a POST
	post   bool   // not idempotent: once sent, a timeout or reset is ErrUncertain and never retried
	stream bool   // file download: return the open body on success
	noWait bool   // fail rather than wait out a 402 pause (Ping)
	// subject names what is asked for ("survey 4574 response da45…") in
	// the errors of bodies the client cannot use.
	subject string
}

// decodeFunc decodes a success body; it returns the request id it found
// (or the one given) and a malformed error if the body is unusable.
type decodeFunc func(status int, requestID string, body []byte, contentType string) (string, error)

// result of one attempt.
type result struct {
	outcome     string
	err         error // nil: success
	retry       bool  // another attempt may help
	retryAfter  time.Duration
	hasRetry    bool // Retry-After was sent
	status      int  // 0: no HTTP answer
	requestID   string
	contentType string
	body        *heldBody      // success body, reserved in the budget until released
	resp        *http.Response // stream success
	sentAt      time.Time
	duration    time.Duration
}

// do runs rq through the gate, the concurrency limit and the token bucket,
// retries by the status policy, and decodes a success with decode. For a
// stream request it returns the open response instead.
func (c *Client) do(ctx context.Context, rq *request, decode decodeFunc) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		probe, err := c.admit(ctx, rq)
		if err != nil {
			return nil, err
		}
		res := c.attempt(ctx, rq)
		c.conc.release()

		if res.err == nil && decode != nil {
			reqID, derr := decode(res.status, res.requestID, res.body.Bytes(), res.contentType)
			res.body.release() // the decoded value holds no reference to the body
			res.body = nil
			res.requestID = c.redact(reqID)
			if derr != nil {
				reason := permanent.Reason(derr)
				if reason == "" {
					reason = "decode"
				}
				res.outcome, res.retry = OutcomeMalformed, false
				res.err = c.scrub(malformed(rq.op, rq.subject, res.status, res.requestID, reason, derr.Error()))
			}
		}
		res.body.release() // no decode func: the body was not needed
		now := time.Now()
		c.m.request(rq.op, res.outcome, res.duration, now)
		c.afterAttempt(ctx, rq, probe, &res, now)

		if res.err == nil {
			return res.resp, nil
		}
		if !res.retry || attempt >= c.maxRetries {
			c.logFailure(ctx, rq, attempt, &res, 0)
			return nil, res.err
		}
		wait := c.retry.Delay(attempt + 1)
		if res.hasRetry {
			wait = min(res.retryAfter, MaxRetryAfter)
		}
		if res.status == http.StatusTooManyRequests {
			c.gate.holdUntil(now.Add(wait)) // everyone waits, not only this caller
		}
		if dl, ok := ctx.Deadline(); ok && now.Add(wait).After(dl) {
			c.logFailure(ctx, rq, attempt, &res, 0)
			return nil, res.err // the next attempt would come after the caller's deadline
		}
		c.logFailure(ctx, rq, attempt, &res, wait)
		c.m.retry(rq.op, res.outcome)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("surveyapi: %s: %w while waiting to retry after: %w", rq.op, err, res.err)
		}
	}
}

// admit passes the gate, takes a concurrency slot and a token. On success
// the caller holds a slot and must release it.
func (c *Client) admit(ctx context.Context, rq *request) (probe bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("surveyapi: %s: %w", rq.op, err)
	}
	if rq.noWait {
		if st := c.gate.state(); st.mode == modePaused && time.Now().Before(st.until) {
			return false, &callError{op: rq.op, kind: ErrQuotaExceeded,
				msg: "calls are paused after a 402 until " + st.until.UTC().Format(time.RFC3339)}
		}
	}
	probe, waited, err := c.gate.admit(ctx, func(authErr error, since, next time.Time) error {
		return &callError{op: rq.op, kind: ErrUnauthorized, cause: authErr,
			msg: fmt.Sprintf("not calling the API: the token was rejected at %s; next check after %s",
				since.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339))}
	})
	if waited > 0 {
		c.m.rateWait.Add(waited.Seconds())
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("surveyapi: %s: %w", rq.op, err)
		}
		return false, err
	}
	giveBack := func(err error) (bool, error) {
		c.gate.done(probe, gateNoAnswer, nil)
		if ctx.Err() == nil { // the token bucket saw that the wait would pass the deadline
			err = context.DeadlineExceeded
		}
		return false, fmt.Errorf("surveyapi: %s: %w", rq.op, err)
	}
	t0 := time.Now()
	if err := c.conc.acquire(ctx); err != nil {
		return giveBack(err)
	}
	t1 := time.Now()
	if d := t1.Sub(t0); d > time.Millisecond {
		c.m.concWait.Add(d.Seconds())
	}
	if c.rate != nil {
		if err := c.rate.Wait(ctx); err != nil {
			c.conc.release()
			return giveBack(err)
		}
		if d := time.Since(t1); d > 0 {
			c.m.rateWait.Add(d.Seconds())
		}
	}
	return probe, nil
}

// attempt sends rq once and classifies the answer.
func (c *Client) attempt(ctx context.Context, rq *request) (res result) {
	res.sentAt = time.Now()
	actx, cancel := context.WithCancel(ctx)
	var timedOut atomic.Bool
	timer := time.AfterFunc(c.timeout, func() { timedOut.Store(true); cancel() })
	stop := func() { timer.Stop(); cancel() }

	var wrote atomic.Bool
	if rq.post {
		actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err == nil {
					wrote.Store(true)
				}
			},
		})
	}
	var body io.Reader
	if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(actx, rq.method, rq.url, body)
	if err != nil {
		stop()
		res.outcome = OutcomeBadRequest
		res.err = &callError{op: rq.op, kind: ErrInvalidArgument, cause: err}
		return res
	}
	if c.transport != nil {
		req.Header = c.header // our transport only reads it (RoundTripper contract): share, no copy
	} else {
		req.Header = c.header.Clone() // an injected client's transport might not be so polite
	}

	resp, err := c.send(req)
	res.duration = time.Since(res.sentAt)
	if err != nil {
		stop()
		c.classifyNoAnswer(ctx, rq, &res, c.scrubbed(err), timedOut.Load(), rq.post && wrote.Load())
		return res
	}
	res.status = resp.StatusCode
	res.contentType = resp.Header.Get("Content-Type")
	res.requestID = c.redact(resp.Header.Get("X-Request-Id"))
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300

	if ok && rq.stream {
		timer.Stop() // headers are in; from now on the timeout applies per stalled Read
		res.outcome = OutcomeOK
		resp.Body = &streamBody{op: rq.op, rc: resp.Body, timer: timer, timeout: c.timeout, timedOut: &timedOut, cancel: cancel}
		res.resp = resp
		return res
	}

	// The body is read under the budget (an error body only for its
	// message, cut at maxErrorBody); a success body announced longer than
	// the limit is refused before a byte of it is read.
	var buf *heldBody
	var rerr error
	// Waiting for the budget is the client's own queue, not the service
	// being slow: the attempt's clock stops meanwhile (the caller's context
	// still bounds the wait) and restarts with a full Timeout.
	w := waiter{pause: timer.Stop, resume: func() { timer.Reset(c.timeout) }}
	if ce := resp.Header.Get("Content-Encoding"); ok && ce != "" && !strings.EqualFold(ce, "identity") {
		// The transport asked for gzip and inflated it (removing the
		// header); anything else was not asked for and cannot be read.
		rerr = fmt.Errorf("%w: Content-Encoding %q was not asked for", errBadEncoding, c.redact(ce))
	} else if ok {
		buf, rerr = c.budget.read(ctx, w, resp.Body, resp.ContentLength, c.budget.max, false)
	} else {
		buf, rerr = c.budget.read(ctx, w, resp.Body, resp.ContentLength, maxErrorBody, true)
	}
	resp.Body.Close()
	stop()
	res.duration = time.Since(res.sentAt)
	c.answered(ctx, rq, &res, buf, c.scrubbed(rerr), timedOut.Load(), resp.Header.Get("Retry-After"), resp.Header.Get("Location"))
	return res
}

// answered classifies an answer whose status, content type and request id
// are in res and whose body was read into buf (rerr: how that ended).
func (c *Client) answered(ctx context.Context, rq *request, res *result, buf *heldBody, rerr error, timedOut bool, retryAfter, location string) {
	if res.status >= 200 && res.status < 300 {
		switch {
		case rerr == nil:
			res.outcome, res.body = OutcomeOK, buf
		case errors.Is(rerr, errBodyTooLarge):
			res.outcome = OutcomeMalformed
			res.err = malformed(rq.op, rq.subject, res.status, res.requestID, "too_large",
				fmt.Sprintf("body larger than %d bytes refused", c.budget.max))
		case errors.Is(rerr, errBadEncoding):
			res.outcome = OutcomeMalformed
			res.err = malformed(rq.op, rq.subject, res.status, res.requestID, "decode", rerr.Error())
		case isGzipError(rerr):
			res.outcome = OutcomeMalformed
			res.err = malformed(rq.op, rq.subject, res.status, res.requestID, "decode",
				"Content-Encoding gzip does not inflate: "+rerr.Error())
		default: // the answer was cut short (or the attempt ended waiting for the budget)
			c.classifyNoAnswer(ctx, rq, res, rerr, timedOut, rq.post)
			res.err = c.annotate(res.err, fmt.Sprintf("HTTP %d answered, body cut short", res.status))
		}
		return
	}

	reqID, msg := decodeError(buf.Bytes(), res.contentType)
	buf.release()
	if reqID == "" {
		reqID = res.requestID
	}
	res.requestID = c.redact(reqID)
	ae := &APIError{Op: rq.op, Status: res.status, RequestID: res.requestID, Message: c.redact(msg)}
	res.err = ae
	switch s := res.status; {
	case s == http.StatusBadRequest, s == http.StatusMethodNotAllowed:
		res.outcome = OutcomeBadRequest
	case s == http.StatusUnauthorized:
		res.outcome = OutcomeUnauthorized
	case s == http.StatusPaymentRequired:
		res.outcome = OutcomeQuota
	case s == http.StatusForbidden:
		res.outcome = OutcomeForbidden
	case s == http.StatusNotFound:
		res.outcome = OutcomeNotFound
	case s == http.StatusTooManyRequests:
		res.outcome, res.retry = OutcomeRateLimited, true
		res.retryAfter, res.hasRetry = parseRetryAfter(retryAfter, time.Now())
	case s >= 500:
		res.outcome, res.retry = OutcomeServerError, true
		res.retryAfter, res.hasRetry = parseRetryAfter(retryAfter, time.Now())
	case s >= 400:
		res.outcome = OutcomeBadRequest
	default: // 1xx, 3xx: redirects are refused
		res.outcome = OutcomeMalformed
		if location != "" {
			ae.Message = c.redact("redirect to " + location + " refused")
		}
	}
}

// isGzipError reports a body the transport could not inflate: asking again
// is not expected to help.
func isGzipError(err error) bool {
	var ce flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &ce)
}

// send sends req. With the client's own transport it calls RoundTrip
// directly: http.Client.Do would only add what the client does not want (a
// redirect loop it refuses anyway, a second copy of the headers for
// redirects, a cookie jar), at about five allocations per request.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	if c.transport == nil {
		return c.hc.Do(req)
	}
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: req.Method[:1] + strings.ToLower(req.Method[1:]), URL: req.URL.Redacted(), Err: err}
	}
	return resp, nil
}

// classifyNoAnswer fills res for a request that got no (complete) answer.
// sent reports that a non-idempotent request had been written out.
func (c *Client) classifyNoAnswer(ctx context.Context, rq *request, res *result, err error, timedOut, sent bool) {
	var ne net.Error
	isTimeout := timedOut || (errors.As(err, &ne) && ne.Timeout())
	switch {
	case ctx.Err() != nil:
		res.outcome = OutcomeCanceled
		if sent {
			res.err = &callError{op: rq.op, kind: ErrUncertain, msg: "the caller gave up after the request was sent", cause: ctx.Err()}
		} else {
			res.err = fmt.Errorf("surveyapi: %s: %w", rq.op, ctx.Err())
		}
	case isTimeout:
		res.outcome = OutcomeTimeout
		e := &callError{op: rq.op, kind: ErrTimeout, extra: ErrNetwork,
			msg: fmt.Sprintf("%s %s: no answer within %s", rq.method, c.path(rq.url), c.timeout)}
		if !timedOut {
			e.cause = err
		}
		if sent {
			e.kind, e.extra = ErrUncertain, ErrTimeout
			e.msg = fmt.Sprintf("%s %s: sent, then no answer within %s", rq.method, c.path(rq.url), c.timeout)
		}
		res.err, res.retry = e, !sent
	default:
		res.outcome = OutcomeNetwork
		e := &callError{op: rq.op, kind: ErrNetwork, cause: err}
		if sent {
			e.kind, e.extra, e.msg = ErrUncertain, ErrNetwork, "connection failed after the request was sent"
		}
		res.err, res.retry = e, !sent
	}
}

func (c *Client) annotate(err error, msg string) error {
	var ce *callError
	if errors.As(err, &ce) {
		if ce.msg == "" {
			ce.msg = msg
		} else {
			ce.msg = msg + "; " + ce.msg
		}
	}
	return err
}

// path strips the base from a URL for messages.
func (c *Client) path(u string) string {
	return strings.TrimPrefix(u, c.base)
}

// afterAttempt feeds the gate and the adaptive limit, and logs transitions.
func (c *Client) afterAttempt(ctx context.Context, rq *request, probe bool, res *result, now time.Time) {
	gr := gateNoAnswer
	switch {
	case res.status == http.StatusUnauthorized:
		gr = gate401
	case res.status == http.StatusPaymentRequired:
		gr = gate402
	case res.status != 0 && res.status < 500 && res.status != http.StatusTooManyRequests:
		gr = gateAnswered // the service processed the request with this token (429 and 5xx prove nothing)
	}
	entered, was := c.gate.done(probe, gr, res.err)
	switch entered {
	case modeUnauthorized:
		c.m.pausesTotal.WithLabelValues("unauthorized").Inc()
		c.log.LogAttrs(ctx, slog.LevelError, "survey API rejected the token: calls stop; one probe per interval checks whether it was fixed",
			slog.String("op", rq.op), slog.String("request_id", res.requestID), slog.String("error", errString(res.err)))
	case modePaused:
		c.m.pausesTotal.WithLabelValues("quota").Inc()
		c.log.LogAttrs(ctx, slog.LevelWarn, "survey API quota exceeded (402): pausing all calls",
			slog.String("op", rq.op), slog.String("request_id", res.requestID), slog.Duration("pause", c.gate.quotaPause),
			slog.String("error", errString(res.err)))
	case modeOpen:
		msg := "survey API calls resume: the quota pause is over"
		if was == modeUnauthorized {
			msg = "survey API accepts the token again: calls resume"
		}
		c.log.LogAttrs(ctx, slog.LevelInfo, msg, slog.String("op", rq.op))
	}
	switch res.outcome {
	case OutcomeOK:
		c.conc.success()
	case OutcomeRateLimited:
		c.conc.rateLimited(res.sentAt, now)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (c *Client) logFailure(ctx context.Context, rq *request, attempt int, res *result, retryIn time.Duration) {
	level := slog.LevelWarn
	switch res.outcome {
	case OutcomeNotFound, OutcomeCanceled:
		level = slog.LevelDebug
	case OutcomeRateLimited:
		level = slog.LevelInfo
	}
	if !c.log.Enabled(ctx, level) {
		return
	}
	attrs := []any{
		slog.String("op", rq.op),
		slog.String("path", c.path(rq.url)),
		slog.Int("attempt", attempt+1),
		slog.String("outcome", res.outcome),
		slog.Int("status", res.status),
		slog.String("request_id", res.requestID),
		slog.String("error", errString(res.err)),
	}
	if retryIn > 0 {
		attrs = append(attrs, slog.Duration("retry_in", retryIn))
	}
	if level == slog.LevelDebug {
		c.log.Log(ctx, level, "survey API call failed", attrs...)
		return
	}
	// One line per cause (operation, outcome and error, ids masked) and
	// back-off step, with a count: a revoked token fails every call in
	// flight at once (issue 19).
	why := res.err
	if why == nil {
		why = errors.New(rq.op + " " + res.outcome)
	}
	c.failLog.Log(level, "survey API call failed", why, attrs...)
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 || secs != secs {
			return 0, false
		}
		if secs > MaxRetryAfter.Seconds() {
			return MaxRetryAfter, true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

// redact removes the token from text that came from the service.
func (c *Client) redact(s string) string {
	if c.token != "" && strings.Contains(s, c.token) {
		return strings.ReplaceAll(s, c.token, "[redacted]")
	}
	return s
}

func (c *Client) scrub(err error) error {
	var ce *callError
	if errors.As(err, &ce) {
		ce.msg, ce.requestID = c.redact(ce.msg), c.redact(ce.requestID)
	}
	var ae *APIError
	if errors.As(err, &ae) {
		ae.Message, ae.RequestID = c.redact(ae.Message), c.redact(ae.RequestID)
	}
	return err
}

// scrubbed returns err, or, when its text holds the token, an error with
// the token removed that keeps only what the client classifies by: a
// timeout, and the sentinel it matched. The original chain is dropped, so
// that nothing unwrapped from it can print the token.
func (c *Client) scrubbed(err error) error {
	if err == nil || c.token == "" || !strings.Contains(err.Error(), c.token) {
		return err
	}
	s := &scrubbedError{msg: c.redact(err.Error())}
	var ne net.Error
	s.timeout = errors.As(err, &ne) && ne.Timeout()
	for _, k := range []error{errBodyTooLarge, errBadEncoding, io.ErrUnexpectedEOF, io.EOF} {
		if errors.Is(err, k) {
			s.kind = k
			break
		}
	}
	return s
}

// scrubbedError is an error whose text had the token in it.
type scrubbedError struct {
	msg     string
	timeout bool
	kind    error // a sentinel it matched, or nil
}

func (e *scrubbedError) Error() string   { return e.msg }
func (e *scrubbedError) Unwrap() error   { return e.kind }
func (e *scrubbedError) Timeout() bool   { return e.timeout }
func (e *scrubbedError) Temporary() bool { return false }

// streamBody is a download's body: the attempt's timeout applies to each
// Read that stalls (not to the whole transfer, nor to the caller's own pace),
// and Close ends the request's context.
type streamBody struct {
	op       string
	rc       io.ReadCloser
	timer    *time.Timer
	timeout  time.Duration
	timedOut *atomic.Bool
	cancel   context.CancelFunc
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF {
		if b.timedOut.Load() {
			return n, &callError{op: b.op, kind: ErrTimeout, extra: ErrNetwork,
				msg: fmt.Sprintf("reading the file: no data for %s", b.timeout)}
		}
		return n, &callError{op: b.op, kind: ErrNetwork, msg: "reading the file", cause: err}
	}
	return n, err
}

func (b *streamBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}
