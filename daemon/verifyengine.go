package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/verify"
)

// newVerifier is the daemon's verification loop (verify.go) on the engine
// of package verify: its lists and details go through the shared API
// client (so they count in api.monthly_budget), the details through the
// privacy policy (the content compared is what the pipeline writes), and
// its repairs through the poller into the pipeline. d.poller is read when
// the loop runs (it is built after the verifier, whose reconciled it
// calls).
func (d *parts) newVerifier(cfg *config.Config, client *surveyapi.Client, fetcher verify.Fetcher, wh warehouse.Warehouse, log *slog.Logger, reg prometheus.Registerer) *verifier {
	var rejected func(context.Context, int64) (map[survey.GUID]string, error)
	if ri, ok := wh.Inventory().(warehouse.RejectInventory); ok {
		rejected = ri.RejectedResponses
	}
	compare := func(ctx context.Context, id int64, sample int) (finding, error) {
		// What completed in the last poll interval may not be read yet:
		// left out on both sides, as surveysync verify does.
		e := verify.New(client, fetcher, wh.Verifier(), verify.Options{Streams: cfg.Sync.Statuses, Sample: sample, Rejected: rejected,
			Until: VerifyUntil(cfg, time.Now())})
		res, err := e.Survey(ctx, id)
		return findingOf(res), err
	}
	recheck := func(ctx context.Context, id int64, ids []survey.GUID) ([]survey.GUID, int64, error) {
		return recheckContent(ctx, fetcher, wh.Verifier(), id, ids)
	}
	return newVerifierLoop(verifierOptions{
		Interval: cfg.Verify.Interval, Sample: cfg.Verify.Sample, Repair: cfg.Verify.Repair,
		Recheck: cfg.Sync.PollInterval, Streams: cfg.Sync.Statuses, Logger: log.With("component", "verify"),
	}, verifierDeps{
		compare:        compare,
		recheckContent: recheck,
		reread: func(ctx context.Context, id int64, ids []survey.GUID, listed []string) error {
			return d.poller.Reread(ctx, id, "verify", ids, listed)
		},
		surveys: func() []int64 { return d.poller.Surveys() },
		stretch: func() float64 { _, s := d.poller.Projection(); return s },
		ready:   nil, // set by assemble once the poller exists
		history: wh.VerifyLog(),
	}, reg)
}

// findingOf narrows the engine's result (nil: none) to the loop's finding.
func findingOf(res *verify.Result) finding {
	if res == nil {
		return finding{}
	}
	f := finding{Calls: res.ListCalls + res.DetailCalls, Sampled: res.Compared}
	for _, s := range res.Streams {
		f.Streams = append(f.Streams, streamFinding{Stream: s.Stream, Service: s.Service, Warehouse: s.Warehouse,
			Missing: s.Missing, Extra: s.Extra, Content: s.Content})
	}
	return f
}

// recheckContent reads the details of ids again and returns those whose
// current rows still differ (one the service no longer has but the
// warehouse shows current differs too; one no longer current here was
// written since, and does not), with the detail calls made.
func recheckContent(ctx context.Context, f verify.Fetcher, r warehouse.VerifyReader, surveyID int64, ids []survey.GUID) ([]survey.GUID, int64, error) {
	stored, err := r.Content(ctx, surveyID, ids)
	if err != nil {
		return nil, 0, fmt.Errorf("verify survey %d: read current rows: %w", surveyID, err)
	}
	var out []survey.GUID
	var calls int64
	for _, id := range ids {
		c, ok := stored[id]
		if !ok {
			continue
		}
		calls++
		resp, err := f.GetResponse(ctx, surveyID, id)
		switch {
		case errors.Is(err, survey.ErrNotFound):
			out = append(out, id)
		case err != nil:
			return out, calls, fmt.Errorf("verify survey %d: read response %s: %w", surveyID, id, err)
		case !verify.ContentOf(resp).Equal(c):
			out = append(out, id)
		}
	}
	return out, calls, nil
}
