package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/verify"
)

// surveysync verify: one verification pass in this process (package
// verify), read-only and safe beside a running daemon; with --repair the
// responses that differ are read again — by the running daemon when one
// answers on metrics.listen (POST RereadPath, with the admin token), else
// in this process — and the surveys verified again.

// RereadPath is the admin endpoint of the metrics listener that reads
// responses of a survey again (surveysync verify --repair): POST a
// RereadRequest as JSON; it answers once they are written.
const RereadPath = "/admin/reread"

// RereadRequest is the body of RereadPath.
type RereadRequest struct {
	SurveyID  int64           `json:"survey_id"`
	Responses []verify.Reread `json:"responses"`
}

// maxRereads bounds one RereadPath request.
const maxRereads = 100_000

// VerifyOptions are surveysync verify's flags.
type VerifyOptions struct {
	Surveys []int64 // none: every survey the daemon would poll, and the ended ones it knows
	Deep    bool
}

// VerifyUntil is a pass's bound: responses completed (started, for
// partial) in the last poll interval and settle lag are left out on both
// sides, as the daemon may not have read them yet.
func VerifyUntil(cfg *config.Config, now time.Time) time.Time {
	return now.Add(-cfg.Sync.PollInterval - cfg.Sync.SettleLag)
}

// Verify verifies each survey once and calls each with its result (or the
// error that stopped it) in survey order. The error is for what stopped
// every survey (the warehouse or the client could not be opened).
func Verify(ctx context.Context, cfg *config.Config, log *slog.Logger, o VerifyOptions, each func(*verify.Result, error)) error {
	reg := prometheus.NewRegistry()
	client, err := NewClient(cfg, log, reg)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	defer client.Close()
	wh, err := OpenWarehouse(ctx, cfg, log, reg)
	if err != nil {
		return fmt.Errorf("open sink: %w", err)
	}
	defer wh.Close()
	policy, err := newPolicy(cfg)
	if err != nil {
		return err
	}
	surveys := o.Surveys
	if len(surveys) == 0 {
		if surveys, err = verifiedSurveys(ctx, cfg, wh, log); err != nil {
			return err
		}
	}
	vo := verify.Options{Streams: cfg.Sync.Statuses, Until: VerifyUntil(cfg, time.Now()), Deep: o.Deep,
		Concurrency: cfg.Sync.FetchConcurrency} // --deep reads details as the pipeline does
	if ri, ok := wh.Inventory().(warehouse.RejectInventory); ok {
		vo.Rejected = ri.RejectedResponses
	}
	e := verify.New(client, policy.Fetcher(client), wh.Verifier(), vo)
	for _, id := range surveys {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := e.Survey(ctx, id)
		each(res, err)
	}
	return nil
}

// verifiedSurveys are the configured surveys and those the surveys table
// knows (ended or not), less surveys_exclude, in ascending order.
func verifiedSurveys(ctx context.Context, cfg *config.Config, wh warehouse.Warehouse, log *slog.Logger) ([]int64, error) {
	book, err := newSurveyBook(ctx, wh, log)
	if err != nil {
		return nil, err
	}
	out := pollingSet(cfg, book)
	for _, id := range book.ended() {
		if !slices.Contains(out, id) && !slices.Contains(cfg.SurveysExclude, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Repair reads again the responses that differ in results: through the
// running daemon when one answers (where is where they were read: the
// daemon's address, or "this process"), else in this process.
func Repair(ctx context.Context, cfg *config.Config, log *slog.Logger, results []*verify.Result) (where string, err error) {
	var reqs []RereadRequest
	for _, r := range results {
		if rr := r.Rereads(); len(rr) > 0 {
			reqs = append(reqs, RereadRequest{SurveyID: r.SurveyID, Responses: rr})
		}
	}
	if len(reqs) == 0 {
		return "", nil
	}
	if Probe(ctx, cfg) == StateRunning {
		addr := Addr(cfg)
		token, err := AdminToken(cfg)
		if err != nil {
			return addr, fmt.Errorf("a daemon answers at %s: %w", addr, err)
		}
		for _, req := range reqs {
			if err := RemoteReread(ctx, addr, token, req); err != nil {
				return addr, err
			}
		}
		return addr, nil
	}
	if cfg.Demo.Emulator.Enabled {
		return "", fmt.Errorf("the demo's emulator lives inside a running daemon: start surveysync run (with metrics.listen on) and repair while it runs")
	}
	return "this process", RereadOnce(ctx, cfg, log, reqs)
}

// RereadOnce reads responses again in this process (no daemon runs), with
// the daemon's pipeline, and returns once they are written.
func RereadOnce(ctx context.Context, cfg *config.Config, log *slog.Logger, reqs []RereadRequest) error {
	reg := prometheus.NewRegistry()
	client, err := NewClient(cfg, log, reg)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	defer client.Close()
	wh, err := OpenWarehouse(ctx, cfg, log, reg)
	if err != nil {
		return fmt.Errorf("open sink: %w", err)
	}
	defer wh.Close()
	policy, err := newPolicy(cfg)
	if err != nil {
		return err
	}
	eraser, closeEraser, err := NewEraser(ctx, cfg, wh, log)
	if err != nil {
		return fmt.Errorf("erase: %w", err)
	}
	defer func() { _ = closeEraser() }()
	var erased func(int64, survey.GUID) bool
	if eraser != nil {
		erased = eraser.Erased // erased responses stay erased
	}
	pipe := newPipeline(cfg, nil, erased, policy.Fetcher(client), wh, log, reg)
	poller := newPoller(cfg, nil, nil, client, client, pipe, wh, nil, log, reg)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return pipe.Run(gctx) })
	g.Go(func() error {
		defer pipe.CloseInput() // the pipeline drains what it holds and ends
		for _, req := range reqs {
			ids, sts := splitRereads(req.Responses)
			if err := poller.Reread(gctx, req.SurveyID, "verify", ids, sts); err != nil {
				return err
			}
		}
		return nil
	})
	return g.Wait()
}

func splitRereads(rr []verify.Reread) ([]survey.GUID, []string) {
	ids := make([]survey.GUID, len(rr))
	sts := make([]string, len(rr))
	for i, r := range rr {
		ids[i], sts[i] = r.ID, r.ListedStatus
	}
	return ids, sts
}

// serveReread adds RereadPath to the metrics listener's mux (admin token
// of tokenPath only, as ResyncPath).
func (d *parts) serveReread(mux *http.ServeMux, token, tokenPath string) {
	mux.HandleFunc("POST "+RereadPath, func(w http.ResponseWriter, r *http.Request) {
		if !adminAuthorized(w, r, token, tokenPath) {
			return
		}
		if !d.leading() {
			http.Error(w, "this instance follows (ha): ask the leader, which runs the poller", http.StatusConflict)
			return
		}
		var req RereadRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "body: want {\"survey_id\": ID, \"responses\": [{\"id\": GUID, \"listed_status\": STATUS}]}: "+err.Error(), http.StatusBadRequest)
			return
		}
		if req.SurveyID <= 0 || len(req.Responses) > maxRereads {
			http.Error(w, fmt.Sprintf("survey_id: want a positive survey id; responses: at most %d", maxRereads), http.StatusBadRequest)
			return
		}
		ids, sts := splitRereads(req.Responses)
		for i, id := range ids {
			g, err := survey.ParseGUID(string(id))
			if err != nil {
				http.Error(w, fmt.Sprintf("responses[%d]: %v", i, err), http.StatusBadRequest)
				return
			}
			ids[i] = g
			if sts[i] != "" && !slices.Contains(verify.Streams, sts[i]) {
				http.Error(w, fmt.Sprintf("responses[%d]: status %q: want one of %v or empty", i, sts[i], verify.Streams), http.StatusBadRequest)
				return
			}
		}
		d.log.Info("re-read asked on the admin endpoint (surveysync verify --repair)", "survey_id", req.SurveyID, "responses", len(ids), "remote", r.RemoteAddr)
		if err := d.poller.Reread(r.Context(), req.SurveyID, "verify", ids, sts); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// RemoteReread asks the daemon whose metrics listener is at addr to read
// req's responses again, and waits until it has written them.
func RemoteReread(ctx context.Context, addr, token string, req RereadRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+RereadPath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Authorization", "Bearer "+token)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return fmt.Errorf("the daemon at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("the daemon at %s: re-read survey %d: %s: %s", addr, req.SurveyID, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
