package webhookrx

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request outcomes in surveysync_webhook_requests_total.
const (
	reqAccepted     = "accepted"
	reqDuplicate    = "duplicate"
	reqBadPath      = "bad_path"
	reqMethod       = "method"
	reqUnauthorized = "unauthorized"
	reqForbidden    = "forbidden"
	reqTooLarge     = "too_large"
	reqBadJSON      = "bad_json"
	reqSpoolFull    = "spool_full"
	reqUnavailable  = "unavailable" // not running, stopping, or the spool cannot be written
)

// Event outcomes in surveysync_webhook_events_total beyond the LogEntry ones.
const (
	evAccepted  = "accepted"  // spooled by a request
	evDuplicate = "duplicate" // acknowledged without spooling, or dropped at replay
	evReplayed  = "replayed"  // found in the spool at start
	evRetried   = "retried"   // a Process attempt failed and will be retried
)

type metrics struct {
	requests     *prometheus.CounterVec
	events       *prometheus.CounterVec
	spoolEvents  prometheus.Gauge
	spoolBytes   prometheus.Gauge
	spoolOldest  prometheus.GaugeFunc
	spoolMaxEvts prometheus.Gauge
	spoolMaxByts prometheus.Gauge
	processDur   prometheus.Histogram
	commitDur    prometheus.Histogram
	commitEvents prometheus.Histogram
	logFailures  prometheus.Counter

	oldestNanos atomic.Int64   // receive time of the oldest spooled event, 0 if none
	memory      func() float64 // bytes of spooled events held in memory
	spoolMemory prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, now func() time.Time, memory func() float64) *metrics {
	m := &metrics{
		memory: memory,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_webhook_requests_total",
			Help: "Webhook HTTP requests by outcome (accepted, duplicate, bad_path, method, unauthorized, forbidden, too_large, bad_json, spool_full, unavailable).",
		}, []string{"outcome"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_webhook_events_total",
			Help: "Webhook events by kind and outcome (accepted, duplicate, replayed, retried, processed, ignored, rejected).",
		}, []string{"event", "outcome"}),
		spoolEvents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_webhook_spool_events",
			Help: "Events in the webhook spool waiting to be processed.",
		}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_webhook_spool_bytes",
			Help: "Bytes of the events in the webhook spool waiting to be processed.",
		}),
		spoolMaxEvts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_webhook_spool_max_events",
			Help: "The spool's cap in events; past it requests get 503.",
		}),
		spoolMaxByts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_webhook_spool_max_bytes",
			Help: "The spool's cap in bytes; past it requests get 503.",
		}),
		processDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_webhook_process_duration_seconds",
			Help:    "Duration of one Process attempt for a webhook event.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_webhook_spool_commit_duration_seconds",
			Help:    "Duration of one group commit (one bbolt transaction, written and fdatasynced) of the webhook spool.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}),
		commitEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_webhook_spool_commit_events",
			Help:    "Events written by one group commit of the webhook spool.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		logFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_webhook_log_failures_total",
			Help: "Failed writes of processed webhook events to the raw event log (webhook_events); the events stay spooled until a retry succeeds.",
		}),
	}
	m.spoolOldest = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surveysync_webhook_spool_oldest_age_seconds",
		Help: "Age of the oldest event waiting in the webhook spool (0 when empty).",
	}, func() float64 {
		n := m.oldestNanos.Load()
		if n == 0 {
			return 0
		}
		return max(0, now().Sub(time.Unix(0, n)).Seconds())
	})
	m.spoolMemory = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surveysync_webhook_spool_memory_bytes",
		Help: "Bytes of spooled webhook events held in memory (handed to the workers); the rest wait on disk. Bounded by the spool's memory window.",
	}, func() float64 { return m.memory() })
	for _, o := range []string{reqAccepted, reqDuplicate, reqBadPath, reqMethod, reqUnauthorized, reqForbidden, reqTooLarge, reqBadJSON, reqSpoolFull, reqUnavailable} {
		m.requests.WithLabelValues(o)
	}
	for _, k := range []string{KindSurveyLaunched, KindResponseReceived, KindSurveyEnded, KindUnknown} {
		for _, o := range []string{evAccepted, evDuplicate, evReplayed, evRetried, OutcomeProcessed, OutcomeIgnored, OutcomeRejected} {
			m.events.WithLabelValues(k, o)
		}
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.events, m.spoolEvents, m.spoolBytes, m.spoolOldest,
			m.spoolMaxEvts, m.spoolMaxByts, m.processDur, m.commitDur, m.commitEvents, m.logFailures, m.spoolMemory)
	}
	return m
}

func (m *metrics) event(kind, outcome string) { m.events.WithLabelValues(kind, outcome).Inc() }
