package daemon

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// excludeList is surveys_exclude at run time: the surveys no webhook and
// no entry of the surveys table may add to the polling set. A reload
// replaces it.
type excludeList struct {
	log     *slog.Logger
	dropped *prometheus.CounterVec // by event name

	mu  sync.RWMutex
	ids map[int64]bool
}

func newExcludeList(ids []int64, log *slog.Logger, reg prometheus.Registerer) *excludeList {
	x := &excludeList{log: log, dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surveysync_webhook_events_excluded_total",
		Help: "Webhook events of surveys in surveys_exclude, acknowledged and dropped, by event name.",
	}, []string{"event"})}
	if reg != nil {
		reg.MustRegister(x.dropped)
	}
	x.set(ids)
	return x
}

// set replaces the excluded surveys.
func (x *excludeList) set(ids []int64) {
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	x.mu.Lock()
	x.ids = m
	x.mu.Unlock()
}

func (x *excludeList) has(id int64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.ids[id]
}

// drop reports whether a webhook event of surveyID is to be dropped (the
// survey is excluded), with a log line and the metric when it is.
func (x *excludeList) drop(surveyID int64, event, id string) bool {
	if !x.has(surveyID) {
		return false
	}
	x.dropped.WithLabelValues(event).Inc()
	x.log.Info("webhook event of an excluded survey acknowledged and dropped (surveys_exclude)", "survey_id", surveyID, "event", event, "event_id", id)
	return true
}
