package poll

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/surveysync/surveysync/survey"
)

// reconcile lists every id of a survey in every stream and re-reads the
// responses the two sides disagree on: in the warehouse but in no list (a
// deletion), in a list but not in the warehouse (missed), or listed under
// another status than the warehouse shows (a change the windows missed, such
// as a late completion dated before the watermark's overlap). A quota-full
// response, listed as quotafull but detailed as disqualified, is no change.
func (p *Poller) reconcile(ctx context.Context, surveyID int64) (err error) {
	start := p.o.Now()
	have, err := p.inv.CurrentResponses(ctx, surveyID)
	if err != nil {
		return fmt.Errorf("reconcile survey %d: read warehouse ids: %w", surveyID, err)
	}
	listed := make(map[survey.GUID]struct{}, len(have))
	var missing, changed []survey.GUID
	var missingSt, changedSt []string
	absolute := p.o.MaxReconcileResponses/p.o.PerPage + 10
	var calls int64
	defer func() {
		if errors.Is(err, errNotBelieved) {
			p.spentDistrusted(calls)
		}
	}()
	for _, stream := range p.o.Statuses {
		limit := absolute
		for page := 1; ; page++ {
			q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
			calls++
			l, err := p.lister.ListResponses(ctx, surveyID, q)
			if err != nil {
				return fmt.Errorf("reconcile survey %d: list %s page %d: %w", surveyID, stream, page, err)
			}
			if page == 1 {
				if l.Total > p.o.MaxReconcileResponses {
					p.m.hostile.WithLabelValues("reconcile_too_big").Inc()
					return fmt.Errorf("reconcile survey %d: the %s list claims %d responses, more than the %d reconcile holds in memory; not reconciled: %w",
						surveyID, stream, l.Total, p.o.MaxReconcileResponses, errNotBelieved)
				}
				limit = p.maxPages(max(l.Total, 0), absolute)
			}
			added := 0
			for _, it := range l.Data {
				if _, dup := listed[it.ResponseID]; dup {
					continue
				}
				added++
				listed[it.ResponseID] = struct{}{}
				status, ok := have[it.ResponseID]
				switch {
				case !ok && p.rejectedAt(surveyID, it.ResponseID, stream):
					// Rejected when listed so: reading it again would
					// reject it again (a changed one is listed otherwise).
					p.m.reconciled.WithLabelValues("rejected_unchanged").Inc()
				case !ok:
					missing = append(missing, it.ResponseID)
					missingSt = append(missingSt, stream)
				case !sameStatus(stream, statusCode(status)):
					changed = append(changed, it.ResponseID)
					changedSt = append(changedSt, stream)
				}
			}
			if len(l.Data) < p.o.PerPage || page*p.o.PerPage >= l.Total {
				break
			}
			if added == 0 {
				p.m.hostile.WithLabelValues("page_adds_nothing").Inc()
				break
			}
			if page >= limit || len(listed) > p.o.MaxReconcileResponses+len(have) {
				p.m.hostile.WithLabelValues("page_cap").Inc()
				return fmt.Errorf("reconcile survey %d: list %s: still more pages after %d (total claims %d): page cap reached: %w",
					surveyID, stream, page, l.Total, errNotBelieved)
			}
		}
	}
	var vanished []survey.GUID
	for id := range have {
		if _, ok := listed[id]; !ok {
			vanished = append(vanished, id)
		}
	}
	tr := &tracker{done: make(chan struct{}, 1)}
	w := tr.open(start, start)
	noop := func() {}
	ids := slices.Concat(vanished, missing, changed)
	sts := slices.Concat(make([]string, len(vanished)), missingSt, changedSt)
	for i, id := range ids {
		if err := p.submit(ctx, tr, w, surveyID, id, "reconcile", sts[i], noop); err != nil {
			tr.sealed(w)
			return err
		}
	}
	tr.sealed(w)
	for {
		_, inflight, werr := tr.snapshot()
		if inflight == 0 {
			if werr != nil {
				return fmt.Errorf("reconcile survey %d: %w", surveyID, werr)
			}
			break
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.m.reconciled.WithLabelValues("vanished").Add(float64(len(vanished)))
	p.m.reconciled.WithLabelValues("missing").Add(float64(len(missing)))
	p.m.reconciled.WithLabelValues("status_changed").Add(float64(len(changed)))
	if len(vanished)+len(missing)+len(changed) > 0 {
		p.o.Logger.Info("reconcile re-read responses", "survey_id", surveyID,
			"vanished", len(vanished), "missing", len(missing), "status_changed", len(changed))
	}
	return nil
}

// rejectedAt reports whether a response was rejected when a list of stream
// showed it (and is listed so still).
func (p *Poller) rejectedAt(surveyID int64, id survey.GUID, stream string) bool {
	h := p.held.get(surveyID, id)
	return h&hsRejected != 0 && sameStatus(stream, h)
}
