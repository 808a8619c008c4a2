package feed

import "github.com/prometheus/client_golang/prometheus"

// Row outcomes (the outcome label of surveysync_feed_rows_total and of a
// RowResult).
const (
	OutcomePushed    = "pushed"    // created now
	OutcomeSkipped   = "skipped"   // its key is already pushed (or in flight, or repeated in the batch)
	OutcomeFailed    = "failed"    // the service refused it, or the call failed for good
	OutcomeInvalid   = "invalid"   // rejected by validation; no call made
	OutcomeUncertain = "uncertain" // may or may not exist in the service; left for the operator
)

// File outcomes (surveysync_feed_files_total).
const (
	FileDone   = "done"
	FileFailed = "failed"
)

type metrics struct {
	rows         *prometheus.CounterVec
	sends        *prometheus.CounterVec
	sendFailures *prometheus.CounterVec
	sendContacts *prometheus.GaugeVec
	files        *prometheus.CounterVec
	uncertain    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_feed_rows_total",
			Help: "Feed rows by outcome: pushed, skipped, failed, invalid, uncertain.",
		}, []string{"feed", "outcome"}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_feed_sends_total",
			Help: "Message sends triggered after feed batches that succeeded.",
		}, []string{"feed"}),
		sendFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_feed_send_failures_total",
			Help: "Message sends triggered after feed batches that failed or whose outcome is unknown.",
		}, []string{"feed"}),
		sendContacts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_feed_send_contacts",
			Help: "contacts_count of the feed's last send, by state: pending, sent, bounces.",
		}, []string{"feed", "state"}),
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_feed_files_total",
			Help: "Files of csv_dir feeds processed, by outcome: done or failed.",
		}, []string{"feed", "outcome"}),
		uncertain: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_feed_uncertain_rows",
			Help: "Keys of the feed in the uncertain state, waiting for an operator (docs/feeds.md).",
		}, []string{"feed"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.rows, m.sends, m.sendFailures, m.sendContacts, m.files, m.uncertain} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
