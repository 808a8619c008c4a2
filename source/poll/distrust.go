package poll

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kinds of list answers not believed (surveysync_poll_list_anomalies_total).
const (
	anImplausibleTotal = iota // a window's halves claim more than the window
	anPageAddsNothing         // a full page holds no id new to the pass
	anPageCap                 // pages beyond what the total allows
	anTotalUnstable           // the total changed during every pass over a window
	nAnomaly
)

var anomalyNames = [nAnomaly]string{"implausible_total", "page_adds_nothing", "page_cap", "total_unstable"}

// NotBelieved starts a stream's LastError while its list answers are not
// believed and it backs off (surveysync status marks such streams).
const NotBelieved = "list answers not believed"

// distrustBurst is how far a distrusted stream's spending may run ahead of
// DistrustCallsPerDay (a generic cell rate: each pass pushes notUntil on by
// its calls' share of a day; the next pass waits until notUntil less this).
// Over any day a distrusted stream spends at most DistrustCallsPerDay ×
// (1 + 1 h / 24 h) calls plus one pass.
const distrustBurst = time.Hour

// errNotBelieved marks a reconcile failure caused by a list answer that is
// not believed.
var errNotBelieved = errors.New(NotBelieved)

// spentDistrusted counts list calls spent on answers not believed.
func (p *Poller) spentDistrusted(calls int64) {
	p.distrustCalls.Add(calls)
	p.m.distrustCalls.Add(float64(calls))
}

// anomaly counts a list answer of kind that the pass does not believe.
func (p *Poller) anomaly(c *pass, kind int) {
	c.anomalies[kind].Add(1)
	p.m.hostile.WithLabelValues(anomalyNames[kind]).Inc()
}

// believed reports whether every list answer of the pass was believed.
func (c *pass) believed() bool {
	for k := range c.anomalies {
		if c.anomalies[k].Load() > 0 {
			return false
		}
	}
	return true
}

// anomalyText lists the pass's anomalies: "implausible_total×1 page_cap×1".
func (c *pass) anomalyText() string {
	var b strings.Builder
	for k := range c.anomalies {
		if n := c.anomalies[k].Load(); n > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s×%d", anomalyNames[k], n)
		}
	}
	return b.String()
}

// distrusted logs, once per back-off step, that a stream's pass was not
// believed, and counts its list calls as the distrusted share of the
// spend.
func (p *Poller) distrusted(surveyID int64, stream string, s *sched) {
	calls := s.pass.calls.Load()
	p.spentDistrusted(calls)
	p.m.distrusted.WithLabelValues(strconv.FormatInt(surveyID, 10), stream).Set(float64(s.distrust))
	attrs := []any{"survey_id", surveyID, "stream", stream, "passes_in_a_row", s.distrust,
		"anomalies", s.pass.anomalyText(), "list_calls", calls, "next_poll_in", s.next.Sub(s.t1).Round(time.Second).String()}
	if s.err != nil {
		attrs = append(attrs, "err", s.err)
	}
	p.o.Logger.Warn(NotBelieved+"; the stream backs off (logged once per back-off step)", attrs...)
}
