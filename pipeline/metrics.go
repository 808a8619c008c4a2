package pipeline

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	submitted    *prometheus.CounterVec
	written      *prometheus.CounterVec
	fetchErrors  *prometheus.CounterVec
	rejects      prometheus.Counter
	queue        *prometheus.GaugeVec
	flushes      *prometheus.CounterVec
	batchRows    *prometheus.HistogramVec
	rowsWritten  *prometheus.CounterVec
	writeErrors  prometheus.Counter
	writeSeconds prometheus.Histogram
	fetchSeconds prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_responses_submitted_total",
			Help: "Responses handed to the pipeline, by source (poll, webhook, reconcile).",
		}, []string{"source"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_responses_written_total",
			Help: "Responses whose rows are durably in the sink, by source.",
		}, []string{"source"}),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_fetch_errors_total",
			Help: "Response detail fetches that failed after the client's retries, by source.",
		}, []string{"source"}),
		rejects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_pipeline_flatten_errors_total",
			Help: "Responses that could not be flattened into rows.",
		}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_pipeline_queue_depth",
			Help: "Items waiting in a pipeline stage's input queue.",
		}, []string{"stage"}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_batch_flushes_total",
			Help: "Batches flushed to the sink, by reason (rows, bytes, delay, drain).",
		}, []string{"reason"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surveysync_pipeline_batch_rows",
			Help:    "Rows per batch written, by table.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"table"}),
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_rows_written_total",
			Help: "Rows durably written to the sink, by table.",
		}, []string{"table"}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_pipeline_write_errors_total",
			Help: "Failed sink write attempts (each is retried).",
		}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_pipeline_write_duration_seconds",
			Help:    "Time of one sink write attempt.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		fetchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_pipeline_fetch_duration_seconds",
			Help:    "Time to fetch one response detail, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.submitted, m.written, m.fetchErrors, m.rejects, m.queue, m.flushes,
			m.batchRows, m.rowsWritten, m.writeErrors, m.writeSeconds, m.fetchSeconds)
	}
	return m
}
