package poll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// reconcile lists every id of a survey in every stream and re-reads the
// responses the two sides disagree on: in the warehouse but in no list (a
// deletion), in a list but not in the warehouse (missed), or listed under
// another status than the warehouse shows (a change the windows missed, such
// as a late completion dated before the watermark's overlap). A quota-full
// response, listed as quotafull but detailed as disqualified, is no change.
//
// One survey is reconciled at a time (Poller.reconciling): a pass holds the
// survey's ids twice (the warehouse's and the lists'), the one structure
// whose size is the survey's, so concurrent passes over several large
// surveys added up (issue 19). reconcile waits for its turn.
func (p *Poller) reconcile(ctx context.Context, surveyID int64) error {
	select {
	case p.reconciling <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.reconciling }()
	return p.reconcileSurvey(ctx, surveyID)
}

// tryReconcile reconciles a survey unless another survey's pass runs; ran
// is false then (the survey's loop tries again soon, and keeps polling
// meanwhile).
func (p *Poller) tryReconcile(ctx context.Context, surveyID int64) (ran bool, err error) {
	select {
	case p.reconciling <- struct{}{}:
	default:
		return false, nil
	}
	defer func() { <-p.reconciling }()
	return true, p.reconcileSurvey(ctx, surveyID)
}

func (p *Poller) reconcileSurvey(ctx context.Context, surveyID int64) (err error) {
	start := p.o.Now()
	var d *reconcileDiff
	if p.o.OnReconcile != nil {
		defer func() {
			if ctx.Err() == nil { // a stop is no finding
				p.o.OnReconcile(p.reconcileReport(surveyID, start, d, err))
			}
		}()
	}
	have, err := p.inv.CurrentResponses(ctx, surveyID)
	if err != nil {
		return fmt.Errorf("reconcile survey %d: read warehouse ids: %w", surveyID, err)
	}
	// The rejected responses not written since, held as rejected (after a
	// restart, or when the held set forgot them): listed at the same status
	// they are not read again.
	rejected, err := p.rejectedResponses(ctx, surveyID)
	if err != nil {
		return fmt.Errorf("reconcile survey %d: read rejected ids: %w", surveyID, err)
	}
	p.holdRejected(surveyID, rejected)
	// The lists end a second after the pass started, as windows start a
	// second early: whether the service's bounds are inclusive is not
	// documented, and a response written before the pass must be listed.
	d = &reconcileDiff{survey: surveyID, until: start.Add(time.Second), have: have, rejected: rejected,
		listed: make(map[heldKey]struct{}, len(have)), listedN: map[string]int64{}}
	defer func() {
		if errors.Is(err, errNotBelieved) {
			p.spentDistrusted(d.calls)
		}
	}()
	for _, stream := range p.o.Statuses {
		if err := p.reconcileList(ctx, d, stream); err != nil {
			return err
		}
	}
	vanished := d.vanished()
	d.vanishedIDs = vanished
	if p.o.OnReconcile != nil {
		p.lateWrites(ctx, d)
	}
	ids := slices.Concat(vanished, d.missing, d.changed)
	sts := slices.Concat(make([]string, len(vanished)), d.missingSt, d.changedSt)
	d.rereads = int64(len(ids))
	if err := p.reread(ctx, surveyID, start, "reconcile", ids, sts); err != nil {
		return err
	}
	p.m.reconciled.WithLabelValues("vanished").Add(float64(len(vanished)))
	p.m.reconciled.WithLabelValues("missing").Add(float64(len(d.missing)))
	p.m.reconciled.WithLabelValues("status_changed").Add(float64(len(d.changed)))
	if len(vanished)+len(d.missing)+len(d.changed) > 0 {
		p.o.Logger.Info("reconcile re-read responses", "survey_id", surveyID,
			"vanished", len(vanished), "missing", len(d.missing), "status_changed", len(d.changed))
	}
	return nil
}

// lateWrites marks the missing responses that were written while the
// lists were read (a poll cycle or a webhook: the warehouse's ids were read
// before the lists): they are re-read like the others, but the report
// does not count them as drift. It reads the warehouse's ids once more,
// only when something is missing.
func (p *Poller) lateWrites(ctx context.Context, d *reconcileDiff) {
	if len(d.missing) == 0 {
		return
	}
	now, err := p.inv.CurrentResponses(ctx, d.survey)
	if err != nil {
		return // counted as missing: the report errs on the side of drift
	}
	d.late = map[survey.GUID]bool{}
	for i, id := range d.missing {
		if st, ok := now[id]; ok && sameStatus(d.missingSt[i], statusCode(st)) {
			d.late[id] = true
		}
	}
}

// reconcileDiff is what a reconcile pass found so far: the ids listed, and
// those listed but missing from the warehouse or held there at another
// status, each with the status it was listed at.
type reconcileDiff struct {
	survey int64
	until  time.Time              // the lists' upper bound: a second after the pass started
	have   map[survey.GUID]string // the warehouse's current responses
	// rejected: responses rejected and not written since, with the status
	// they were listed at (RejectInventory; nil without one).
	rejected map[survey.GUID]string
	listed   map[heldKey]struct{} // keyOf(survey, id): 16 bytes an id, not a string
	listedN  map[string]int64     // ids listed per stream, each once
	calls    int64                // list calls
	rereads  int64                // responses re-read (one detail call each)

	vanishedIDs []survey.GUID        // set once every list was read
	late        map[survey.GUID]bool // missing ones written meanwhile (lateWrites)

	missing, changed     []survey.GUID
	missingSt, changedSt []string
}

// vanished returns the ids the warehouse holds that no list showed.
func (d *reconcileDiff) vanished() []survey.GUID {
	var out []survey.GUID
	for id := range d.have {
		if _, ok := d.listed[keyOf(d.survey, id)]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// reconcileList lists every id of one stream into d, up to d.until (what
// completed since is the windows' to read, and would move the total). If the stream's total changes while it is paged, a response may
// have landed among the pages already read (a late response dated in the
// past) or one may have left them: it is paged again, up to three passes,
// each id compared once; still moving after three, it is compared as
// listed. Before, such a response was missed until the next reconcile (a
// poll cycle does not read behind its watermark's overlap).
func (p *Poller) reconcileList(ctx context.Context, d *reconcileDiff, stream string) error {
	for attempt := 1; ; attempt++ {
		var again map[heldKey]struct{} // the ids of a pass after the first
		if attempt > 1 {
			again = map[heldKey]struct{}{}
		}
		total, last, err := p.reconcilePass(ctx, d, stream, again)
		if err != nil || last == total {
			return err
		}
		if attempt >= 3 {
			p.m.hostile.WithLabelValues(anomalyNames[anTotalUnstable]).Inc()
			p.o.Logger.Info("reconcile: a list changed during each of 3 passes; compared as listed", "survey_id", d.survey,
				"stream", stream, "total_before", total, "total_after", last)
			return nil
		}
		p.o.Logger.Info("reconcile: a list changed while paged; paging it again", "survey_id", d.survey, "stream", stream,
			"total_before", total, "total_after", last)
	}
}

// reconcilePass pages one stream once into d and returns the totals its
// first and last pages claimed. A claim of more than MaxReconcileResponses,
// or pages beyond the cap, fail with errNotBelieved; a page adding no id
// new to the pass ends it. A pass after the first collects its ids in
// again (a second id set, only while a list moves); the first needs none.
func (p *Poller) reconcilePass(ctx context.Context, d *reconcileDiff, stream string, again map[heldKey]struct{}) (first, last int, err error) {
	absolute := p.o.MaxReconcileResponses/p.o.PerPage + 10
	limit := absolute
	for page := 1; ; page++ {
		q := survey.ListQuery{Page: page, PerPage: p.o.PerPage, Status: stream}
		if stream == pipeline.StreamPartial {
			q.EndStartedAt = d.until
		} else {
			q.EndCompletedAt = d.until
		}
		d.calls++
		l, err := p.lister.ListResponses(ctx, d.survey, q)
		if err != nil {
			return 0, 0, fmt.Errorf("reconcile survey %d: list %s page %d: %w", d.survey, stream, page, err)
		}
		if page == 1 {
			if l.Total > p.o.MaxReconcileResponses {
				p.m.hostile.WithLabelValues("reconcile_too_big").Inc()
				return 0, 0, fmt.Errorf("reconcile survey %d: the %s list claims %d responses, more than the %d reconcile holds in memory; not reconciled: %w",
					d.survey, stream, l.Total, p.o.MaxReconcileResponses, errNotBelieved)
			}
			limit = p.maxPages(max(l.Total, 0), absolute)
			first = l.Total
		}
		added := 0
		for _, it := range l.Data {
			k := keyOf(d.survey, it.ResponseID)
			_, dup := d.listed[k]
			if again != nil {
				if _, seen := again[k]; seen {
					continue
				}
				again[k] = struct{}{}
			} else if dup {
				continue
			}
			added++
			if !dup {
				d.listed[k] = struct{}{}
				d.listedN[stream]++
				p.compare(d, it.ResponseID, stream)
			}
		}
		if len(l.Data) < p.o.PerPage || page*p.o.PerPage >= l.Total {
			return first, l.Total, nil
		}
		if added == 0 {
			p.m.hostile.WithLabelValues("page_adds_nothing").Inc()
			return first, l.Total, nil
		}
		if page >= limit || len(d.listed) > p.o.MaxReconcileResponses+len(d.have) {
			p.m.hostile.WithLabelValues("page_cap").Inc()
			return 0, 0, fmt.Errorf("reconcile survey %d: list %s: still more pages after %d (total claims %d): page cap reached: %w",
				d.survey, stream, page, l.Total, errNotBelieved)
		}
	}
}

// compare records a response listed in stream that the warehouse lacks
// (unless it was rejected when listed so, in this process or as the reject
// records say: reading it again would reject it again, and a changed one is
// listed otherwise) or holds at another status.
func (p *Poller) compare(d *reconcileDiff, id survey.GUID, stream string) {
	status, ok := d.have[id]
	switch {
	case !ok && (p.rejectedAt(d.survey, id, stream) || sameStatus(stream, statusCode(d.rejected[id]))):
		p.m.reconciled.WithLabelValues("rejected_unchanged").Inc()
	case !ok:
		d.missing = append(d.missing, id)
		d.missingSt = append(d.missingSt, stream)
	case !sameStatus(stream, statusCode(status)):
		d.changed = append(d.changed, id)
		d.changedSt = append(d.changedSt, stream)
	}
}

// Reread submits responses of a survey to the pipeline, each with the
// status of the list that showed it ("" for one no list shows: the
// pipeline writes its deletion when the service answers 404), and waits
// until all are acknowledged. The daemon's verification repairs so
// (source "verify": a pipeline metric label); unchanged details are
// written again (the warehouse's rows may be what differs).
func (p *Poller) Reread(ctx context.Context, surveyID int64, source string, ids []survey.GUID, listed []string) error {
	if len(ids) != len(listed) {
		return fmt.Errorf("reread survey %d: %d ids, %d statuses", surveyID, len(ids), len(listed))
	}
	now := p.o.Now()
	return p.reread(ctx, surveyID, now, source, ids, listed)
}

// reread submits the responses a reconcile pass found, each held at its
// listed status once written ("" for a vanished one), and waits until all
// are acknowledged.
func (p *Poller) reread(ctx context.Context, surveyID int64, start time.Time, source string, ids []survey.GUID, sts []string) error {
	tr := &tracker{done: make(chan struct{}, 1)}
	w := tr.open(start, start)
	noop := func() {}
	for i, id := range ids {
		if err := p.submit(ctx, tr, w, surveyID, id, source, sts[i], noop); err != nil {
			tr.sealed(w)
			return err
		}
	}
	tr.sealed(w)
	for {
		_, inflight, werr := tr.snapshot()
		if inflight == 0 {
			if werr != nil {
				return fmt.Errorf("%s survey %d: %w", source, surveyID, werr)
			}
			return nil
		}
		select {
		case <-tr.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// rejectedAt reports whether a response was rejected when a list of stream
// showed it (and is listed so still).
func (p *Poller) rejectedAt(surveyID int64, id survey.GUID, stream string) bool {
	h := p.held.get(surveyID, id)
	return h&hsRejected != 0 && sameStatus(stream, h)
}

// ReconcileReport is what a reconcile pass found in one survey, before it
// re-read the differences (Options.OnReconcile): the full id comparison
// reports into the daemon's verification figures.
type ReconcileReport struct {
	SurveyID          int64
	Started, Finished time.Time
	// Streams has one entry per stream polled, in Options.Statuses' order.
	Streams []ReconcileStream
	// Calls are the pass's API calls: its list calls and one detail call
	// per response re-read.
	Calls  int64
	Reread int64 // responses submitted again (the repair)
	Err    error // the pass failed; Streams hold what it had found
}

// ReconcileStream is one stream's figures in a ReconcileReport. Service
// is the ids its lists showed; Warehouse the current responses at a status
// of the stream. Missing: listed, not current at a matching status (a
// response held at another status is missing here and extra in the stream
// of the status held). Extra: current at a status of the stream, listed by
// no stream at that status.
type ReconcileStream struct {
	Stream                             string
	Service, Warehouse, Missing, Extra int64
}

// reconcileReport summarises d (nil: the pass failed before listing).
func (p *Poller) reconcileReport(surveyID int64, start time.Time, d *reconcileDiff, err error) ReconcileReport {
	r := ReconcileReport{SurveyID: surveyID, Started: start, Finished: p.o.Now(), Err: err}
	idx := map[string]int{}
	for i, st := range p.o.Statuses {
		idx[st] = i
		r.Streams = append(r.Streams, ReconcileStream{Stream: st, Service: -1, Warehouse: -1})
	}
	if d == nil {
		return r
	}
	r.Calls = d.calls + d.rereads
	if err == nil {
		r.Reread = d.rereads
	}
	streamOfHeld := func(status string) (int, bool) {
		i, ok := idx[status]
		if !ok && status == survey.StatusDisqualified { // a quota-full response, detailed as disqualified
			i, ok = idx[pipeline.StreamQuotaFull]
		}
		return i, ok
	}
	for i := range r.Streams {
		r.Streams[i].Service = d.listedN[r.Streams[i].Stream]
		r.Streams[i].Warehouse = 0
	}
	for _, status := range d.have {
		if i, ok := streamOfHeld(status); ok {
			r.Streams[i].Warehouse++
		}
	}
	for j, st := range d.missingSt {
		if i, ok := idx[st]; ok && !d.late[d.missing[j]] {
			r.Streams[i].Missing++
		}
	}
	for _, st := range d.changedSt {
		if i, ok := idx[st]; ok {
			r.Streams[i].Missing++
		}
	}
	for _, id := range d.changed {
		if i, ok := streamOfHeld(d.have[id]); ok {
			r.Streams[i].Extra++
		}
	}
	for _, id := range d.vanishedIDs {
		if i, ok := streamOfHeld(d.have[id]); ok {
			r.Streams[i].Extra++
		}
	}
	return r
}
