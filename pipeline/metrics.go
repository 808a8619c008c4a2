package pipeline

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

type metrics struct {
	submitted    *prometheus.CounterVec
	written      *prometheus.CounterVec
	fetchErrors  *prometheus.CounterVec
	rejects      prometheus.Counter
	rejected     *prometheus.CounterVec
	unchanged    prometheus.Counter
	erased       prometheus.Counter
	queue        *prometheus.GaugeVec
	flushes      *prometheus.CounterVec
	batchRows    *prometheus.HistogramVec
	rowsWritten  *prometheus.CounterVec
	writeErrors  prometheus.Counter
	writeFailing *prometheus.GaugeVec
	writeSeconds prometheus.Histogram
	fetchSeconds prometheus.Histogram

	// Per survey (the polling set: configured surveys and those learned
	// from webhooks), never per response.
	surveyResponses *prometheus.CounterVec
	surveyAnswers   *prometheus.CounterVec
	newest          *prometheus.GaugeVec
	newestSeen      map[newestKey]float64 // writer goroutine only
}

type newestKey struct {
	survey int64
	stream string
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
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_rejected_total",
			Help: "Responses given up on and recorded in the reject store (table rejects, or rejects/*.jsonl), by stage (fetch, flatten, write) and reason.",
		}, []string{"stage", "reason"}),
		erased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_pipeline_responses_erased_skipped_total",
			Help: "Responses submitted again after they were erased (a tombstone): acknowledged without being read or written.",
		}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_pipeline_responses_unchanged_total",
			Help: "Re-read responses whose detail had not changed since this process wrote it: acknowledged without a write.",
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
		writeFailing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_sink_write_failing",
			Help: "1 while writes of responses and answers to the sink fail and the batch is held for a retry, by the table the failing write targeted (responses, answers, other) and class (refused: the warehouse refuses the rows until an operator acts; transient: an outage); 0 otherwise.",
		}, []string{"table", "class"}),
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
		surveyResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_survey_responses_written_total",
			Help: "Responses durably written, by survey and response status (completed, partial, disqualified, quotafull, deleted, other).",
		}, []string{"survey_id", "status"}),
		surveyAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_pipeline_survey_answers_written_total",
			Help: "Answer rows durably written, by survey and response status.",
		}, []string{"survey_id", "status"}),
		newest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_pipeline_newest_response_timestamp_seconds",
			Help: "Unix time of the newest response written, by survey and stream: its date_completed (date_created for partial); sync lag = time() - this.",
		}, []string{"survey_id", "stream"}),
		newestSeen: map[newestKey]float64{},
	}
	// Every source starts at 0, so that rate() and alert rules see the first
	// fetch error instead of a series born with it.
	for _, src := range []string{"poll", "webhook", "reconcile"} {
		m.submitted.WithLabelValues(src)
		m.written.WithLabelValues(src)
		m.fetchErrors.WithLabelValues(src)
	}
	// Rows written and the failing gauge start at 0 too: a sink that never
	// took a row must still show rate(rows) == 0 to the alert rules.
	for _, t := range []string{flatten.TableResponses, flatten.TableAnswers} {
		m.rowsWritten.WithLabelValues(t)
	}
	m.setFailing("", "")
	// The usual rejects start at 0 too (alert rules use increase()).
	for _, sr := range [][2]string{
		{StageFetch, "decode"}, {StageFetch, "bad_date"}, {StageFetch, "bad_guid"}, {StageFetch, "too_large"},
		{StageFlatten, flatten.ReasonDateOutOfRange}, {StageFlatten, flatten.ReasonTooManyAnswers}, {StageFlatten, flatten.ReasonBadFileID},
		{StageWrite, "bad_value"}, {StageWrite, "insert_rejected"},
	} {
		m.rejected.WithLabelValues(sr[0], sr[1])
	}
	if reg != nil {
		reg.MustRegister(m.submitted, m.written, m.fetchErrors, m.rejects, m.rejected, m.unchanged, m.erased, m.queue, m.flushes,
			m.batchRows, m.rowsWritten, m.writeErrors, m.writeFailing, m.writeSeconds, m.fetchSeconds,
			m.surveyResponses, m.surveyAnswers, m.newest)
	}
	return m
}

// setFailing sets surveysync_sink_write_failing: 1 for table and class, 0
// for every other series ("" for both: nothing is failing).
func (m *metrics) setFailing(table, class string) {
	for _, t := range []string{flatten.TableResponses, flatten.TableAnswers, "other"} {
		for _, c := range []string{WriteRefused, WriteTransient} {
			v := 0.0
			if t == table && c == class {
				v = 1
			}
			m.writeFailing.WithLabelValues(t, c).Set(v)
		}
	}
}

// itemMeta is what the writer records about one response once its batch is
// durable.
type itemMeta struct {
	survey  int64
	status  string    // a bounded label value (see statusLabel)
	answers int       // answer rows of this response
	at      time.Time // date_completed, date_created for partial; zero for deletions
}

func newItemMeta(surveyID int64, resp *survey.Response, deleted bool, answers int) itemMeta {
	m := itemMeta{survey: surveyID, status: survey.StatusDeleted, answers: answers}
	if deleted || resp == nil {
		return m
	}
	m.status = statusLabel(resp.ResponseStatus)
	switch {
	case m.status == survey.StatusPartial:
		m.at = resp.DateCreated.Time
	case resp.DateCompleted != nil && m.status != "other":
		m.at = resp.DateCompleted.Time
	}
	return m
}

// statusLabel keeps the status label bounded whatever the service sends.
func statusLabel(s string) string {
	switch s {
	case survey.StatusCompleted, survey.StatusPartial, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusDeleted:
		return s
	}
	return "other"
}

// writtenItems records the per-survey metrics of a durable batch. Only the
// writer goroutine calls it.
func (m *metrics) writtenItems(items []itemMeta) {
	for _, it := range items {
		id := strconv.FormatInt(it.survey, 10)
		m.surveyResponses.WithLabelValues(id, it.status).Inc()
		if it.answers > 0 {
			m.surveyAnswers.WithLabelValues(id, it.status).Add(float64(it.answers))
		}
		if it.at.IsZero() {
			continue
		}
		ts := float64(it.at.Unix())
		k := newestKey{it.survey, it.status}
		if old, ok := m.newestSeen[k]; ok && old >= ts {
			continue
		}
		m.newestSeen[k] = ts
		m.newest.WithLabelValues(id, it.status).Set(ts)
	}
}
