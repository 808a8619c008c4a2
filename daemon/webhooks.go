package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// surveyLister is the one API call the processor makes itself: reading a
// survey's first response, to check that the token can read the survey.
type surveyLister interface {
	ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error)
}

// surveyPoller is what the processor changes in the poller (*poll.Poller).
type surveyPoller interface {
	AddSurvey(id int64)
	EndSurvey(id int64)
}

// webhookProcessor turns spooled webhook events into work: a received
// response goes through the same pipeline as the poller's (so a response
// arriving both ways is one row); survey events update the surveys table and
// the polling set. It returns only when the effect is durable, so the spool
// keeps the event until then. Errors that asking again cannot fix (403, 400,
// a malformed answer, an event without its ids) are returned as
// permanent.New("webhook", …): the event ends, recorded as rejected with the error,
// and holds no worker; the others are retried by the receiver with backoff.
type webhookProcessor struct {
	pipe    *pipeline.Pipeline
	poller  surveyPoller
	surveys *surveyBook
	api     surveyLister
	inv     warehouse.Inventory // nil without one (Parquet)
	now     func() time.Time
	exclude *excludeList // nil: none
	// checks bounds the cost of webhooks naming responses that do not
	// exist (webhookcheck.go); nil: built on first use.
	checks     *webhookChecks
	checksOnce sync.Once
}

func (w *webhookProcessor) check() *webhookChecks {
	w.checksOnce.Do(func() {
		if w.checks == nil {
			w.checks = newWebhookChecks(w.api, w.now)
		}
	})
	return w.checks
}

// final marks the errors asking again cannot fix as permanent for the
// receiver.
func final(err error) error {
	if err != nil && (surveyapi.IsPermanent(err) || permanent.Is(err)) {
		return permanent.New("webhook", err)
	}
	return err
}

func (w *webhookProcessor) Process(ctx context.Context, ev webhookrx.Event) error {
	e := ev.Parsed
	if e.SurveyID <= 0 {
		return permanent.Errorf("bad_event", "event %s (%s) has no survey_id", ev.ID, ev.Name)
	}
	if w.exclude != nil && w.exclude.drop(e.SurveyID, ev.Kind(), ev.ID) {
		return nil // acknowledged: the service need not send it again
	}
	if ev.Kind() != webhookrx.KindUnknown {
		if err := w.check().admit(e.SurveyID, w.surveys.has(e.SurveyID)); err != nil { // configured, or in the surveys table
			return permanent.New("webhook", err)
		}
	}
	switch ev.Kind() {
	case webhookrx.KindResponseReceived:
		if e.ResponseID == "" {
			return permanent.Errorf("bad_event", "response_received event %s has no response_id", ev.ID)
		}
		return w.responseReceived(ctx, ev)
	case webhookrx.KindSurveyLaunched:
		// One list call: a survey the token cannot read (403) or that does
		// not exist (404) must not join the polling set for good.
		if err := w.readable(ctx, e.SurveyID); err != nil {
			return err
		}
		at := w.now()
		if e.LaunchedAt != nil {
			at = e.LaunchedAt.Time
		}
		if err := w.surveys.update(ctx, e.SurveyID, func(s *pipeline.SurveyInfo) { s.LaunchedAt = &at; s.EndedAt = nil }); err != nil {
			return err
		}
		w.poller.AddSurvey(e.SurveyID)
	case webhookrx.KindSurveyEnded:
		at := w.now()
		if e.EndedAt != nil {
			at = e.EndedAt.Time
		} else if e.CompletedAt != nil {
			at = e.CompletedAt.Time
		}
		if err := w.confirmEnded(ctx, e.SurveyID, at); err != nil {
			return err
		}
		if err := w.surveys.update(ctx, e.SurveyID, func(s *pipeline.SurveyInfo) { s.EndedAt = &at }); err != nil {
			return err
		}
		w.poller.EndSurvey(e.SurveyID)
	}
	return nil
}

// readable makes one list call: a survey the token cannot read (403) or
// that does not exist (404) gives a permanent error and must not join the
// polling set for good. A survey one of whose list calls answered within
// readableTTL is not asked again.
func (w *webhookProcessor) readable(ctx context.Context, surveyID int64) error {
	c := w.check()
	if c.readable(surveyID) {
		return nil
	}
	_, err := w.api.ListResponses(ctx, surveyID, survey.ListQuery{Page: 1, PerPage: 1})
	if errors.Is(err, surveyapi.ErrForbidden) || errors.Is(err, survey.ErrNotFound) {
		c.markDenied(surveyID, err)
		return permanent.New("webhook", fmt.Errorf("survey %d, which the API token cannot read: not added to the polling set: %w", surveyID, err))
	}
	if err == nil {
		c.markReadable(surveyID)
	}
	return final(err)
}

// responseReceived fetches and writes the response a webhook names. An id
// known to be absent is never fetched without a check, and neither are
// the events of a survey whose webhooks name absent responses: they are
// checked against a listing of the survey made after they arrived
// (webhookcheck.go), one for all the events waiting, and only the listed
// ones are fetched. An absent response ends the event as rejected and puts
// its survey in the polling set: if it appears later, its next webhook or
// the poller writes it.
func (w *webhookProcessor) responseReceived(ctx context.Context, ev webhookrx.Event) error {
	e := ev.Parsed
	c := w.check()
	key := responseKey{survey: e.SurveyID, id: e.ResponseID}
	if !c.absent.has(key, w.now()) {
		direct, err := c.startDirect(ctx, e.SurveyID)
		if err != nil {
			return err
		}
		if direct {
			err := w.fetch(ctx, e.SurveyID, e.ResponseID)
			c.endDirect(e.SurveyID)
			return err
		}
	}
	ok, l, err := c.listed(ctx, e.SurveyID, e.ResponseID, needOf(ev))
	if errors.Is(err, surveyapi.ErrForbidden) || errors.Is(err, survey.ErrNotFound) {
		c.markDenied(e.SurveyID, err)
		return permanent.New("webhook", fmt.Errorf("survey %d, which the API token cannot read: not added to the polling set: %w", e.SurveyID, err))
	}
	if err != nil {
		return final(err)
	}
	if !ok {
		c.miss(key)
		w.poller.AddSurvey(e.SurveyID)
		how := "listed in full"
		if !l.complete {
			how = fmt.Sprintf("listed up to %d pages", listMaxPages)
		}
		return permanent.New("webhook", fmt.Errorf("response %s of survey %d: not listed by the service (completed since %s, %s, %s, %d list calls for every webhook that waited): not fetched; the survey is polled",
			e.ResponseID, e.SurveyID, l.from.UTC().Format(time.RFC3339), strings.Join(l.statuses, "/"), how, l.calls))
	}
	return w.fetch(ctx, e.SurveyID, e.ResponseID)
}

// fetch reads one response's detail and writes it through the pipeline.
func (w *webhookProcessor) fetch(ctx context.Context, surveyID int64, id survey.GUID) error {
	done := make(chan error, 1)
	err := w.pipe.Submit(ctx, pipeline.Ref{
		SurveyID: surveyID, ResponseID: id, Source: "webhook", Urgent: true,
		OnNotFound: func(ctx context.Context) (bool, error) { return w.known(ctx, surveyID, id) },
		Done:       func(err error) { done <- err },
	})
	if err != nil {
		return err
	}
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case errors.Is(err, pipeline.ErrNotWritten):
		// The detail may lag the webhook: nothing is written, but a
		// readable survey joins the polling set, so the poller writes
		// the response once the service lists it.
		w.check().miss(responseKey{survey: surveyID, id: id})
		if rerr := w.readable(ctx, surveyID); rerr != nil {
			return rerr
		}
		w.poller.AddSurvey(surveyID)
		return permanent.New("webhook", fmt.Errorf("response %s of survey %d: not found (404) and never synced: no deletion written; the survey is polled", id, surveyID))
	case errors.Is(err, surveyapi.ErrForbidden):
		w.check().markDenied(surveyID, err)
		return final(err)
	case err != nil:
		return final(err)
	}
	// Only a survey whose response could be read joins the polling set.
	w.check().absent.forget(responseKey{survey: surveyID, id: id})
	w.check().markReadable(surveyID)
	w.poller.AddSurvey(surveyID)
	return nil
}

// endSkew is how far in the future a survey_ended may date the end (the
// service's clock against ours).
const endSkew = time.Minute

// confirmEnded checks a survey_ended against the service before the survey
// goes to the ended cadence (polled every 6 h): an unsigned webhook is no
// proof, and a forged one would starve a live survey's polling. One list
// call: the responses started after the claimed end, in progress
// (status partial, the first to show a survey that takes answers). A survey
// that ended has none; one that lists any is live, and the event is
// rejected. An end dated in the future is rejected without a call, and so
// is one no later than an end already found contradicted; a survey gets
// endCheckBurst such calls, then one per endCheckInterval, and the events beyond
// are rejected (the safe side: the survey keeps its cadence), so a flood of
// them costs a call per survey and interval, not one each.
//
// What one call cannot see: an end dated a moment ago on a live survey
// whose next respondent has not started yet. Such a survey goes to the
// ended cadence after its final sync, and back to the normal one at its
// next response_received (AddSurvey re-adds an ended survey).
func (w *webhookProcessor) confirmEnded(ctx context.Context, surveyID int64, at time.Time) error {
	if now := w.now(); at.After(now.Add(endSkew)) {
		return permanent.New("webhook", fmt.Errorf("survey %d: survey_ended dates the end %s, in the future (now %s): not acted on; the survey keeps its cadence",
			surveyID, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	}
	c := w.check()
	res, err := c.startEndCheck(surveyID, at)
	if err != nil {
		return permanent.New("webhook", err)
	}
	// From a second after the end: a respondent who started in the very
	// second the survey ended does not make it live (the bound is inclusive).
	l, err := w.api.ListResponses(ctx, surveyID, survey.ListQuery{Page: 1, PerPage: 1, StartStartedAt: at.Add(time.Second), Status: survey.StatusPartial})
	n := 0
	if l != nil {
		n = max(l.Total, len(l.Data))
	}
	c.endEndCheck(surveyID, at, res, err, n > 0)
	if errors.Is(err, surveyapi.ErrForbidden) || errors.Is(err, survey.ErrNotFound) {
		return permanent.New("webhook", fmt.Errorf("survey %d, which the API token cannot read: survey_ended not acted on: %w", surveyID, err))
	}
	if err != nil {
		return final(err)
	}
	if n > 0 {
		return permanent.New("webhook", fmt.Errorf("survey %d: survey_ended says it ended at %s, but the service lists %d responses started since: the survey is live; not acted on (a forged or mistaken event), the survey keeps its cadence",
			surveyID, at.UTC().Format(time.RFC3339), n))
	}
	return nil
}

// known reports whether a response is in the sink's inventory, for a
// webhook whose response answered 404: a deletion is written only for a
// response the warehouse has. Without an inventory (Parquet) it is never
// written from a webhook; the poller's reconcile finds real deletions.
func (w *webhookProcessor) known(ctx context.Context, surveyID int64, id survey.GUID) (bool, error) {
	if w.inv == nil {
		return false, nil
	}
	return w.inv.HasResponse(ctx, surveyID, id)
}
