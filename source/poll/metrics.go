package poll

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	cycles            *prometheus.CounterVec
	cycleSeconds      *prometheus.HistogramVec
	pages             *prometheus.CounterVec
	listed            *prometheus.CounterVec
	reread            *prometheus.CounterVec
	reconciled        *prometheus.CounterVec
	watermark         *prometheus.GaugeVec
	reconciles        *prometheus.CounterVec
	skipped           *prometheus.CounterVec
	hostile           *prometheus.CounterVec
	distrusted        *prometheus.GaugeVec
	distrustCalls     prometheus.Counter
	projectedDistrust prometheus.Gauge
	interval          *prometheus.GaugeVec
	projected         prometheus.Gauge
	budget            prometheus.Gauge
	stretch           prometheus.Gauge
}

// newMetrics registers the poller's metrics. The series of every stream
// (and reconcile reason) start at 0, so that rate() and alert rules see the
// first error or repage instead of a series born with it.
func newMetrics(reg prometheus.Registerer, streams []string) *metrics {
	m := &metrics{
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_cycles_total",
			Help: "Poll cycles of a stream, by stream and outcome (ok, error).",
		}, []string{"stream", "outcome"}),
		cycleSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surveysync_poll_cycle_duration_seconds",
			Help:    "Duration of one poll cycle of a stream, until every response is written.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}, []string{"stream"}),
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_pages_total",
			Help: "Response list pages read, by stream.",
		}, []string{"stream"}),
		listed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_responses_listed_total",
			Help: "Response ids read from list pages, by stream.",
		}, []string{"stream"}),
		reread: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_window_repages_total",
			Help: "Windows paged again because their total changed while paged.",
		}, []string{"stream"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_reconciled_total",
			Help: "Responses re-read by the reconcile pass, by reason (vanished from lists, missing from warehouse, status_changed); rejected_unchanged: not read again, rejected when listed at the same status.",
		}, []string{"reason"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_poll_watermark_timestamp_seconds",
			Help: "Unix time of a stream's watermark: every response up to it is written.",
		}, []string{"survey_id", "stream"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_reconcile_passes_total",
			Help: "Reconcile passes of a survey, by outcome (ok, error).",
		}, []string{"outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_held_skipped_total",
			Help: "Listed responses not fetched because they are already written at the listed status, by stream.",
		}, []string{"stream"}),
		hostile: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_poll_list_anomalies_total",
			Help: "List answers not believed, by kind (implausible_total, page_adds_nothing, page_cap, total_unstable, reconcile_too_big).",
		}, []string{"kind"}),
		distrusted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_poll_stream_distrusted",
			Help: "Passes in a row whose list answers a stream did not believe (0: believed); such a stream backs off.",
		}, []string{"survey_id", "stream"}),
		distrustCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_poll_distrusted_list_calls_total",
			Help: "List calls spent by poll passes (and reconcile passes) whose list answers were not believed.",
		}),
		projectedDistrust: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_api_calls_projected_monthly_distrusted",
			Help: "The part of surveysync_api_calls_projected_monthly spent on list answers not believed; -1 until measured.",
		}),
		interval: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_poll_interval_seconds",
			Help: "The interval until a stream's next poll cycle: poll interval, idle backoff, webhook safety net or ended cadence, times the budget stretch.",
		}, []string{"survey_id", "stream"}),
		projected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_api_calls_projected_monthly",
			Help: "API calls per 30 days at the pace of the last budget window (every call of this process: lists, details, files, contacts); -1 until measured.",
		}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_api_monthly_budget",
			Help: "api.monthly_budget: the monthly API calls the poller plans to (0 = unlimited).",
		}),
		stretch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_poll_interval_stretch",
			Help: "Factor every poll interval is stretched by to fit api.monthly_budget (1 = none).",
		}),
	}
	m.projected.Set(-1)
	m.projectedDistrust.Set(-1)
	m.reconciles.WithLabelValues("ok")
	m.reconciles.WithLabelValues("error")
	m.stretch.Set(1)
	for _, k := range []string{"implausible_total", "page_adds_nothing", "page_cap", "total_unstable", "reconcile_too_big"} {
		m.hostile.WithLabelValues(k)
	}
	for _, st := range streams {
		m.skipped.WithLabelValues(st)
		m.cycles.WithLabelValues(st, "ok")
		m.cycles.WithLabelValues(st, "error")
		m.pages.WithLabelValues(st)
		m.listed.WithLabelValues(st)
		m.reread.WithLabelValues(st)
	}
	for _, r := range []string{"vanished", "missing", "status_changed", "rejected_unchanged"} {
		m.reconciled.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.cycles, m.cycleSeconds, m.pages, m.listed, m.reread, m.reconciled, m.watermark,
			m.reconciles, m.skipped, m.hostile, m.interval, m.projected, m.budget, m.stretch,
			m.distrusted, m.distrustCalls, m.projectedDistrust)
	}
	return m
}
