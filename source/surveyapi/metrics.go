package surveyapi

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation label values. Every request the client sends carries one.
const (
	OpCreateContact = "create_contact"
	OpSendMessage   = "send_message"
	OpListResponses = "list_responses"
	OpGetResponse   = "get_response"
	OpDownloadFile  = "download_file"
	OpPing          = "ping"
)

// Outcome label values of surveysync_api_requests_total: one per sent
// request (attempt), so retries count too.
const (
	OutcomeOK           = "ok"
	OutcomeBadRequest   = "bad_request"  // 400, 405, other 4xx
	OutcomeUnauthorized = "unauthorized" // 401
	OutcomeQuota        = "quota"        // 402
	OutcomeForbidden    = "forbidden"    // 403
	OutcomeNotFound     = "not_found"    // 404
	OutcomeRateLimited  = "rate_limited" // 429
	OutcomeServerError  = "server_error" // 5xx
	OutcomeNetwork      = "network"      // refused, reset, DNS, TLS, body cut short
	OutcomeTimeout      = "timeout"      // the attempt exceeded Options.Timeout
	OutcomeMalformed    = "malformed"    // a success status with a body we cannot read; 1xx/3xx
	OutcomeCanceled     = "canceled"     // the caller's context ended while the request was out
)

var operations = [...]string{OpCreateContact, OpSendMessage, OpListResponses, OpGetResponse, OpDownloadFile, OpPing}

var outcomes = [...]string{
	OutcomeOK, OutcomeBadRequest, OutcomeUnauthorized, OutcomeQuota, OutcomeForbidden, OutcomeNotFound,
	OutcomeRateLimited, OutcomeServerError, OutcomeNetwork, OutcomeTimeout, OutcomeMalformed, OutcomeCanceled,
}

func opIndex(op string) int {
	for i, o := range operations {
		if o == op {
			return i
		}
	}
	panic("surveyapi: unknown operation " + op)
}

func outcomeIndex(outcome string) int {
	for i, o := range outcomes {
		if o == outcome {
			return i
		}
	}
	panic("surveyapi: unknown outcome " + outcome)
}

// metrics holds the Prometheus collectors and the cheap in-process counters
// behind Client.Count and Client.Stats.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	retries      *prometheus.CounterVec
	rateWait     prometheus.Counter
	concWait     prometheus.Counter
	limit        prometheus.GaugeFunc
	inFlight     prometheus.GaugeFunc
	paused       prometheus.Gauge
	authFailed   prometheus.Gauge
	monthCalls   prometheus.GaugeFunc
	pausesTotal  *prometheus.CounterVec
	requestsPre  [len(operations)][len(outcomes)]prometheus.Counter // curried children, no map lookups per call
	durationPre  [len(operations)]prometheus.Observer
	counts       [len(operations)][len(outcomes)]atomic.Int64
	retriesCount atomic.Int64

	monthMu  sync.Mutex   // held only to roll over to a new month
	monthEnd atomic.Int64 // unix ns of the start of the next UTC month
	monthN   atomic.Int64 // requests sent since the start of the current UTC month
}

// newMetrics makes the collectors and registers them on reg (if any);
// snapshot reports the adaptive limit and the requests in flight, read at
// scrape time.
func newMetrics(reg prometheus.Registerer, snapshot func() (limit, inFlight int)) (*metrics, error) {
	m := &metrics{}
	m.build(snapshot)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.duration, m.retries, m.rateWait, m.concWait,
			m.limit, m.inFlight, m.paused, m.authFailed, m.monthCalls, m.pausesTotal} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	for i, op := range operations {
		for j, oc := range outcomes {
			m.requestsPre[i][j] = m.requests.WithLabelValues(op, oc)
		}
		m.durationPre[i] = m.duration.WithLabelValues(op)
		// Retry series exist from the start, so rate() and alerts see the first one.
		for _, reason := range []string{OutcomeRateLimited, OutcomeServerError, OutcomeNetwork, OutcomeTimeout} {
			m.retries.WithLabelValues(op, reason)
		}
	}
	for _, r := range []string{"quota", "unauthorized"} {
		m.pausesTotal.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) build(snapshot func() (limit, inFlight int)) {
	*m = metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_api_requests_total",
			Help: "Requests sent to the survey service, by operation and outcome (each retry counts).",
		}, []string{"operation", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surveysync_api_request_duration_seconds",
			Help:    "Duration of one request to the survey service until its body was read (file downloads: until the headers).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_api_retries_total",
			Help: "Retries of survey service requests, by operation and the reason of the failed attempt.",
		}, []string{"operation", "reason"}),
		rateWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_api_rate_limit_wait_seconds_total",
			Help: "Time callers spent waiting for the token bucket (api.rate_limit) and the shared 429 gate (Retry-After / backoff).",
		}),
		concWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_api_concurrency_wait_seconds_total",
			Help: "Time callers spent waiting for a free slot under the adaptive concurrency limit.",
		}),
		limit: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surveysync_api_concurrency_limit",
			Help: "Current adaptive limit of in-flight requests (halved on 429, creeping back to api.max_concurrency).",
		}, func() float64 { l, _ := snapshot(); return float64(l) }),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surveysync_api_in_flight",
			Help: "Requests to the survey service currently in flight.",
		}, func() float64 { _, n := snapshot(); return float64(n) }),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_api_paused",
			Help: "1 while API calls are paused (402 quota pause, or 401 token rejected), else 0.",
		}),
		authFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_api_auth_failed",
			Help: "1 while the API token is rejected (401); calls fail fast and a probe is sent at most once a minute.",
		}),
		monthCalls: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surveysync_api_calls_month",
			Help: "Requests this process sent since the start of the current UTC month (budget the monthly quota with increase(surveysync_api_requests_total[30d]) across restarts).",
		}, func() float64 { return float64(m.callsThisMonth(time.Now())) }),
		pausesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_api_pauses_total",
			Help: "Times the client paused all calls, by reason (quota = 402, unauthorized = 401).",
		}, []string{"reason"}),
	}
}

// request records one sent request.
func (m *metrics) request(op, outcome string, d time.Duration, now time.Time) {
	i, j := opIndex(op), outcomeIndex(outcome)
	m.requestsPre[i][j].Inc()
	m.counts[i][j].Add(1)
	m.durationPre[i].Observe(d.Seconds())

	if now.UnixNano() >= m.monthEnd.Load() {
		m.rollMonth(now)
	}
	m.monthN.Add(1)
}

// rollMonth starts counting a new month (a request racing the roll-over may
// land in either month).
func (m *metrics) rollMonth(now time.Time) {
	m.monthMu.Lock()
	defer m.monthMu.Unlock()
	if now.UnixNano() < m.monthEnd.Load() {
		return
	}
	m.monthN.Store(0)
	m.monthEnd.Store(monthStart(now).AddDate(0, 1, 0).UnixNano())
}

func (m *metrics) callsThisMonth(now time.Time) int64 {
	if now.UnixNano() >= m.monthEnd.Load() {
		return 0
	}
	return m.monthN.Load()
}

func (m *metrics) retry(op, reason string) {
	m.retries.WithLabelValues(op, reason).Inc()
	m.retriesCount.Add(1)
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
