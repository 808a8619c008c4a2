package blob

import "github.com/prometheus/client_golang/prometheus"

// Failure reasons, the values of surveysync_files_failures_total{reason}.
const (
	ReasonDownload  = "download"   // the API call or the body stream failed
	ReasonNotFound  = "not_found"  // the service answered 404 for the file
	ReasonTooLarge  = "too_large"  // bigger than Options.MaxSize
	ReasonTruncated = "truncated"  // fewer bytes than Content-Length
	ReasonStore     = "store"      // the object store refused or was unreachable
	ReasonSpool     = "spool"      // the local spool file could not be written
	ReasonIndex     = "index"      // index rows could not be written (they are kept and retried)
	ReasonQueueFull = "queue_full" // a discovered file did not fit the queue (deferred to the index)
	ReasonDelete    = "delete"     // marking or removing a deleted response's files failed
)

type metrics struct {
	copied     prometheus.Counter
	bytes      prometheus.Counter
	failures   *prometheus.CounterVec
	skipped    prometheus.Counter
	queueDepth prometheus.Gauge
	duration   prometheus.Histogram
	deleted    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		copied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_files_copied_total",
			Help: "Uploaded files copied into the object store.",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_files_bytes_total",
			Help: "Bytes of uploaded files copied into the object store.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_files_failures_total",
			Help: "Failed file copy attempts and index writes, by reason.",
		}, []string{"reason"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_files_skipped_total",
			Help: "Files not copied because the object was already stored with its size and SHA-256.",
		}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_files_queue_depth",
			Help: "Files waiting to be copied (queued or waiting to retry).",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surveysync_files_copy_duration_seconds",
			Help:    "Time to copy one file (download, hash, store), successful copies only.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 9), // 5 ms … 5.5 min
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_files_deleted_total",
			Help: "Files marked deleted because their response was deleted.",
		}),
	}
	for _, r := range []string{ReasonDownload, ReasonNotFound, ReasonTooLarge, ReasonTruncated, ReasonStore, ReasonSpool, ReasonIndex, ReasonQueueFull, ReasonDelete} {
		m.failures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.copied, m.bytes, m.failures, m.skipped, m.queueDepth, m.duration, m.deleted)
	}
	return m
}
