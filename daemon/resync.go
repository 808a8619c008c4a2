package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// Resync on demand (surveysync resync): a running daemon takes the job on
// its metrics listener (POST ResyncPath, with the admin token,
// admintoken.go); without one, the
// command runs it in its own process (ResyncOnce). Either way the job is
// saved in the state store first, and a daemon started later finishes an
// interrupted one (source/poll/resync.go).

// ResyncPath is the admin endpoint of the metrics listener that queues a
// resync: POST with survey, and from and to in RFC 3339 (optional).
const ResyncPath = "/admin/resync"

// newPipeline is the pipeline of a daemon or of a one-shot resync.
func newPipeline(cfg *config.Config, onResponse func(context.Context, int64, survey.GUID, *survey.Response), erased func(int64, survey.GUID) bool, f pipeline.Fetcher, wh warehouse.Warehouse, log *slog.Logger, reg prometheus.Registerer) *pipeline.Pipeline {
	return pipeline.New(pipeline.Options{
		OnResponse: onResponse,
		// onResponse reads the status, the survey's name and the upload
		// questions: a batch keeps only those until its write (issue 19).
		Retain:           func(r *survey.Response) *survey.Response { return files.Retained(r, cfg.Files.TypeMatch) },
		Erased:           erased, // tombstones (erase): acknowledged without a read or a write
		FetchConcurrency: cfg.Sync.FetchConcurrency,
		MaxRows:          cfg.Sync.Batch.MaxRows,
		MaxBytes:         int(cfg.Sync.Batch.MaxBytes),
		MaxDelay:         cfg.Sync.Batch.MaxDelay,
		Rejects:          wh,
		Logger:           log.With("component", "pipeline"),
		Registerer:       reg,
	}, f, wh)
}

// newPoller is the poller of a daemon (surveys: the polling set) or of a
// one-shot resync (none).
func newPoller(cfg *config.Config, surveys, ended []int64, client *surveyapi.Client, lister poll.Lister, pipe *pipeline.Pipeline, wh warehouse.Warehouse, onReconcile func(poll.ReconcileReport), log *slog.Logger, reg prometheus.Registerer) *poll.Poller {
	return poll.New(poll.Options{
		Surveys:               surveys,
		Ended:                 ended,
		Webhooks:              cfg.Webhooks.Enabled,
		MonthlyBudget:         cfg.API.MonthlyBudget,
		CallCount:             func() int64 { return client.Stats().Total },
		Statuses:              cfg.Sync.Statuses,
		PollInterval:          cfg.Sync.PollInterval,
		Overlap:               cfg.Sync.Overlap,
		SettleLag:             cfg.Sync.SettleLag,
		PartialLookback:       cfg.Sync.PartialLookback,
		PartialRescanInterval: cfg.Sync.PartialRescan,
		ReconcileInterval:     reconcileInterval(cfg.Sync.ReconcileInterval),
		OnReconcile:           onReconcile,
		BackfillFrom:          cfg.Sync.BackfillFrom,
		Unreadable:            surveyUnreadable,
		Logger:                log.With("component", "poll"),
		Registerer:            reg,
	}, lister, pipe, wh, wh.Inventory())
}

// ResyncOnce runs a resync in this process (no daemon runs): it queues the
// job, runs it and every other pending one, and returns once they are
// written. Interrupted, the job stays pending for the next daemon start or
// resync.
func ResyncOnce(ctx context.Context, cfg *config.Config, log *slog.Logger, surveyID int64, from, to time.Time) (poll.ResyncJob, error) {
	reg := prometheus.NewRegistry()
	client, err := NewClient(cfg, log, reg)
	if err != nil {
		return poll.ResyncJob{}, fmt.Errorf("api client: %w", err)
	}
	wh, err := OpenWarehouse(ctx, cfg, log, reg)
	if err != nil {
		return poll.ResyncJob{}, fmt.Errorf("open sink: %w", err)
	}
	defer wh.Close()
	policy, err := newPolicy(cfg)
	if err != nil {
		return poll.ResyncJob{}, err
	}
	// Erased responses stay erased: a resync acknowledges their tombstones
	// without reading or writing them, as the daemon does.
	eraser, closeEraser, err := NewEraser(ctx, cfg, wh, log)
	if err != nil {
		return poll.ResyncJob{}, fmt.Errorf("erase: %w", err)
	}
	defer func() { _ = closeEraser() }()
	var erased func(int64, survey.GUID) bool
	if eraser != nil {
		erased = eraser.Erased
	}
	var poller *poll.Poller
	pipe := newPipeline(cfg, func(_ context.Context, id int64, rid survey.GUID, r *survey.Response) {
		st := survey.StatusDeleted
		if r != nil {
			st = r.ResponseStatus
		}
		poller.Observe(id, rid, st)
	}, erased, policy.Fetcher(client), wh, log, reg)
	poller = newPoller(cfg, nil, nil, client, client, pipe, wh, nil, log, reg)
	if err := poller.LoadStates(ctx); err != nil {
		return poll.ResyncJob{}, err
	}
	job, err := poller.Resync(ctx, surveyID, from, to)
	if err != nil {
		return job, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return pipe.Run(gctx) })
	g.Go(func() error {
		defer pipe.CloseInput() // the pipeline drains what it holds and ends
		return poller.RunResyncs(gctx)
	})
	return job, g.Wait()
}

// serveResync adds ResyncPath to the metrics listener's mux: requests
// with the admin token of tokenPath only (whatever their source address;
// a browser's cross-site form post cannot set the Authorization header).
func (d *parts) serveResync(mux *http.ServeMux, token, tokenPath string) {
	mux.HandleFunc("POST "+ResyncPath, func(w http.ResponseWriter, r *http.Request) {
		if !adminAuthorized(w, r, token, tokenPath) {
			return
		}
		if !d.leading() {
			http.Error(w, "this instance follows (ha): ask the leader, which runs the poller", http.StatusConflict)
			return
		}
		id, err := strconv.ParseInt(r.FormValue("survey"), 10, 64)
		if err != nil || id <= 0 {
			http.Error(w, "survey: want a positive survey id", http.StatusBadRequest)
			return
		}
		var from, to time.Time
		for _, p := range []struct {
			name string
			t    *time.Time
		}{{"from", &from}, {"to", &to}} {
			if v := r.FormValue(p.name); v != "" {
				if *p.t, err = time.Parse(time.RFC3339, v); err != nil {
					http.Error(w, p.name+": want RFC 3339: "+err.Error(), http.StatusBadRequest)
					return
				}
			}
		}
		job, err := d.poller.Resync(r.Context(), id, from, to)
		switch {
		case surveyUnreadable(err):
			http.Error(w, fmt.Sprintf("survey %d: %s", id, describeUnreadable(err)), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		d.log.Info("resync asked on the admin endpoint", "survey_id", id, "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(job)
	})
}

// RemoteResync asks the daemon whose metrics listener is at addr to queue
// a resync, with its admin token (AdminToken); zero from or to are left to
// the daemon (the backfill's start, now).
func RemoteResync(ctx context.Context, addr, token string, surveyID int64, from, to time.Time) (poll.ResyncJob, error) {
	var job poll.ResyncJob
	q := url.Values{"survey": {strconv.FormatInt(surveyID, 10)}}
	if !from.IsZero() {
		q.Set("from", from.UTC().Format(time.RFC3339))
	}
	if !to.IsZero() {
		q.Set("to", to.UTC().Format(time.RFC3339))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+ResyncPath+"?"+q.Encode(), nil)
	if err != nil {
		return job, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return job, fmt.Errorf("the daemon at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusAccepted {
		return job, fmt.Errorf("the daemon at %s: %s: %s", addr, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &job); err != nil {
		return job, fmt.Errorf("the daemon at %s: its answer: %w", addr, err)
	}
	return job, nil
}
