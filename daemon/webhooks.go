package daemon

import (
	"context"
	"errors"
	"fmt"
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
	switch ev.Kind() {
	case webhookrx.KindResponseReceived:
		if e.ResponseID == "" {
			return permanent.Errorf("bad_event", "response_received event %s has no response_id", ev.ID)
		}
		done := make(chan error, 1)
		err := w.pipe.Submit(ctx, pipeline.Ref{
			SurveyID: e.SurveyID, ResponseID: e.ResponseID, Source: "webhook", Urgent: true,
			OnNotFound: func(ctx context.Context) (bool, error) { return w.known(ctx, e.SurveyID, e.ResponseID) },
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
			if rerr := w.readable(ctx, e.SurveyID); rerr != nil {
				return rerr
			}
			w.poller.AddSurvey(e.SurveyID)
			return permanent.New("webhook", fmt.Errorf("response %s of survey %d: not found (404) and never synced: no deletion written; the survey is polled", e.ResponseID, e.SurveyID))
		case err != nil:
			return final(err)
		}
		// Only a survey whose response could be read joins the polling set.
		w.poller.AddSurvey(e.SurveyID)
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
		if err := w.surveys.update(ctx, e.SurveyID, func(s *pipeline.SurveyInfo) { s.EndedAt = &at }); err != nil {
			return err
		}
		w.poller.EndSurvey(e.SurveyID)
	}
	return nil
}

// readable makes one list call: a survey the token cannot read (403) or
// that does not exist (404) gives a permanent error and must not join the
// polling set for good.
func (w *webhookProcessor) readable(ctx context.Context, surveyID int64) error {
	_, err := w.api.ListResponses(ctx, surveyID, survey.ListQuery{Page: 1, PerPage: 1})
	if errors.Is(err, surveyapi.ErrForbidden) || errors.Is(err, survey.ErrNotFound) {
		return permanent.New("webhook", fmt.Errorf("survey %d, which the API token cannot read: not added to the polling set: %w", surveyID, err))
	}
	return final(err)
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
