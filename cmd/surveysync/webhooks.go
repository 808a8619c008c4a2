package main

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/webhookrx"
)

// webhookProcessor turns spooled webhook events into work: a received
// response goes through the same pipeline as the poller's (so a response
// arriving both ways is one row); survey events update the surveys table and
// the polling set. It returns only when the effect is durable, so the spool
// keeps the event until then.
type webhookProcessor struct {
	pipe    *pipeline.Pipeline
	poller  *poll.Poller
	surveys *surveyBook
	now     func() time.Time
}

func (w *webhookProcessor) Process(ctx context.Context, ev webhookrx.Event) error {
	e := ev.Parsed
	if e.SurveyID <= 0 {
		return permanent.Errorf("bad_event", "event %s (%s) has no survey_id", ev.ID, ev.Name)
	}
	switch ev.Kind() {
	case webhookrx.KindResponseReceived:
		if e.ResponseID == "" {
			return permanent.Errorf("bad_event", "response_received event %s has no response_id", ev.ID)
		}
		w.poller.AddSurvey(e.SurveyID)
		done := make(chan error, 1)
		err := w.pipe.Submit(ctx, pipeline.Ref{
			SurveyID: e.SurveyID, ResponseID: e.ResponseID, Source: "webhook", Urgent: true,
			Done: func(err error) { done <- err },
		})
		if err != nil {
			return err
		}
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	case webhookrx.KindSurveyLaunched:
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
