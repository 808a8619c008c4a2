// Package daemon is surveysync's daemon: it translates the configuration
// into components (components.go: the log, the API client, the warehouse,
// the webhook receiver; feeds.go, blob.go, privacy.go, ha.go), wires them
// to one another (assemble), and holds the policy between them: what a
// webhook event means (webhooks.go), which surveys are polled (polling.go,
// exclude.go, reload.go) and the surveys table (surveys.go), resync on
// demand (resync.go), what only the HA leader runs
// (ha.go), and the metrics listener with its health and status endpoints
// (metrics.go). Doctor (doctor.go) checks what Run needs; remote.go is the
// client side of a running daemon's listener, for surveysync status.
// cmd/surveysync parses the command line, calls into this package and
// prints.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/erase"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// Options are what the command line adds to the configuration for Run.
type Options struct {
	// Version is the build's version, for the surveysync_build_info metric
	// and the start line of the log.
	Version string
	// ExitWhenSynced stops the daemon once every survey is caught up (the
	// poller's first pass ended and the file copier drained); it fails if
	// a configured survey cannot be read, or the service rejects the token.
	ExitWhenSynced bool
	// OnSynced, with ExitWhenSynced, is called once every survey is caught
	// up, before the daemon stops: synced responses in all, and where the
	// data is (the warehouse's String).
	OnSynced func(synced int64, where string)
	// Force starts although another daemon's lease on the ClickHouse
	// database is live (run --force; guard.go). The Parquet folder's lock
	// cannot be forced: its holder is alive by definition.
	Force bool
	// Reload reads the configuration again (the same file, environment
	// and flags) at a SIGHUP (reload.go); nil: SIGHUP is not handled.
	Reload func() (*config.Config, error)
	// PrivacyApplyCommand is the command a refusal to start with stricter
	// privacy rules names (surveysync privacy apply with this run's
	// configuration flags).
	PrivacyApplyCommand string
}

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT
// is not set: a safety net above what a sync needs (its live heap peaks at
// about 40 MiB at the default batch size, docs/benchmarks.md, issue 19), so
// that a heap which would double at the next collection is collected
// earlier instead (docs/architecture.md, "Memory").
const defaultMemoryLimit = 256 << 20

// Run is the daemon (surveysync run): it runs until ctx ends (SIGTERM),
// then stops taking work and drains the pipeline for at most
// shutdown.drain_timeout; with ExitWhenSynced, until every survey is
// caught up. It changes cfg when it starts the built-in emulator (the API
// section then points at it).
func Run(rootCtx context.Context, cfg *config.Config, log *slog.Logger, o Options) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	reg := newRegistry(o.Version)

	// Two contexts: intake stops on SIGTERM (sources stop reading), work is
	// cancelled only after the drain timeout (the hard stop).
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(rootCtx))
	defer cancelWork()
	intakeCtx, cancelIntake := context.WithCancel(rootCtx)
	defer cancelIntake()

	// Services with their own lifetime (emulator, metrics server) stop last.
	svc, svcCtx := errgroup.WithContext(workCtx)
	defer func() { cancelWork(); _ = svc.Wait() }()

	if cfg.Demo.Emulator.Enabled {
		if _, err := startEmulator(svcCtx, svc, cfg, log); err != nil {
			return err
		}
	}
	client, err := NewClient(cfg, log, reg)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	// The single-instance guard (guard.go): the Parquet folder first,
	// before anything writes to it.
	dirLock, err := lockDataDir(cfg, log)
	if err != nil {
		return err
	}
	// SIGTERM while starting (waiting for the warehouse, say) is a clean
	// stop, not a failure.
	startFailed := func(err error) error {
		if rootCtx.Err() != nil {
			log.Info("stopped while starting", "err", err)
			return nil
		}
		return err
	}
	defer func() { _ = dirLock.Unlock() }()
	// The metrics listener answers while the start-up waits (startup.go):
	// /healthz is up, /readyz says what it waits for.
	h := &health{client: client, start: &startup{}}
	late := newLateRoutes()
	var adminToken string
	if cfg.Metrics.Listen != "" {
		// Written before the listener answers: a command that finds the
		// daemon there finds its token too (admintoken.go).
		if adminToken, err = ensureAdminToken(AdminTokenPath(cfg), log); err != nil {
			return fmt.Errorf("%w: with metrics.listen on, the daemon keeps its admin token in parquet.dir (also with ClickHouse): make %s writable by the daemon's user, or set parquet.dir to a folder that is", err, cfg.Parquet.Dir)
		}
		if err := serveMetrics(svcCtx, svc, cfg.Metrics.Listen, cfg.Metrics.Pprof, reg, h, late, log); err != nil {
			return err
		}
	}
	if o.ExitWhenSynced && !cfg.Demo.Emulator.Enabled {
		if err := checkAPIOnce(intakeCtx, cfg, log); err != nil {
			return startFailed(err)
		}
	}
	wh, err := openWarehouseWaiting(intakeCtx, cfg, log, reg, h.start, o.ExitWhenSynced)
	if err != nil {
		return startFailed(err)
	}
	defer wh.Close()
	lease, err := takeLease(intakeCtx, cfg, wh, o.Force, o.Version, log, reg)
	if err != nil {
		return startFailed(err)
	}
	if lease != nil {
		defer lease.start(svcCtx)() // released before the warehouse closes
	}
	applyCmd := o.PrivacyApplyCommand
	if applyCmd == "" {
		applyCmd = "surveysync privacy apply --config <this configuration>"
	}
	if err := checkPrivacyRules(intakeCtx, cfg, wh, applyCmd, log); err != nil {
		return startFailed(err)
	}
	d, err := assemble(intakeCtx, cfg, client, wh, log, reg)
	if err != nil {
		return startFailed(err)
	}
	defer func() { _ = d.close() }()
	if o.ExitWhenSynced {
		d.verifier = nil // a one-shot run ends at its first pass: nothing to verify after it
	}
	h.attach(d.health)
	d.health = h
	routes := http.NewServeMux()
	serveHAStatus(routes, d.elector)
	if cfg.Metrics.Listen != "" {
		d.serveResync(routes, adminToken, AdminTokenPath(cfg))
		d.serveReread(routes, adminToken, AdminTokenPath(cfg))
	}
	late.set(routes)
	if !o.ExitWhenSynced {
		svc.Go(func() error { waitAPI(intakeCtx, cfg, h.start, log); return nil })
	}
	log.Info("surveysync started", "version", o.Version, "sink", wh.String(), "surveys", len(d.surveys), "api", cfg.API.BaseURL)

	work := d.startWork(workCtx)
	intakeErr := d.runIntake(intakeCtx, cancelIntake, o)
	if rootCtx.Err() != nil {
		notifyStopping(log)
		log.Info("stopping: intake closed, draining the pipeline", "drain_timeout", cfg.Shutdown.DrainTimeout)
	}
	d.pipe.CloseInput()
	stop := time.AfterFunc(cfg.Shutdown.DrainTimeout, func() {
		log.Warn("drain timeout reached: abandoning unwritten responses (they are read again at the next start)")
		cancelWork()
	})
	workErr := work.Wait()
	stop.Stop()
	if intakeErr != nil && (rootCtx.Err() == nil || !errors.Is(intakeErr, context.Canceled)) {
		return intakeErr // not an error of the stop itself (a source cancelled by SIGTERM)
	}
	if workErr != nil && !errors.Is(workErr, context.Canceled) {
		return workErr
	}
	log.Info("surveysync stopped cleanly")
	return nil
}

func newRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "surveysync_build_info", Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	reg.MustRegister(buildInfo)
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	return reg
}

// parts are the daemon's components, wired to one warehouse. The optional
// ones (copier, rx) are nil when not configured; feeds idles without feeds.
type parts struct {
	pipe    *pipeline.Pipeline
	poller  *poll.Poller
	book    *surveyBook
	copier  *blob.Copier
	eraser  *erase.Service // nil when the warehouse cannot erase
	rx      *webhookrx.Receiver
	feeds   *feedSlot // the feed runner, replaced at a reload
	health  *health
	elector *ha.Elector // nil without ha: this daemon leads
	// verifier is the continuous verification (verify.go); nil when
	// verify.interval is 0.
	verifier *verifier
	// eraseDeleted: a response deleted at the source is erased
	// (sync.erase_deleted).
	eraseDeleted bool
	access       *accessWatch // the poller's lister: which surveys answer 403
	log          *slog.Logger
	cfg          *config.Config // the configuration running: a reload replaces it (under the reload goroutine only)
	surveys      []int64
	exclude      *excludeList
	hooks        *webhookChecks // the webhook processor's per-survey state; nil without webhooks
	where        string
	close        func() error // closes the files store
}

// assemble builds the components: the files copier, the survey book, the
// pipeline, the poller, the webhook receiver and the feed runner.
func assemble(ctx context.Context, cfg *config.Config, client *surveyapi.Client, wh warehouse.Warehouse, log *slog.Logger, reg prometheus.Registerer) (d *parts, err error) {
	// The one point where a fetched response enters the pipeline: every
	// detail is transformed by the privacy rules before anything (rows,
	// rejects, the file copier, logs) sees it.
	policy, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	d = &parts{health: &health{client: client, sink: wh}, where: wh.String(), log: log, cfg: cfg, close: func() error { return nil }}
	built := d // an error return sets d to nil
	defer func() {
		if err != nil {
			_ = built.close()
		}
	}()
	if d.elector, err = newElector(cfg, log, reg); err != nil {
		return nil, err
	}
	if cfg.Files.Enabled {
		copier, closeStore, err := newCopier(ctx, cfg, client, wh, log, reg)
		if err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
		d.copier, d.close = copier, closeStore
	}
	if d.book, err = newSurveyBook(ctx, wh, log.With("component", "surveys")); err != nil {
		return nil, err
	}
	// Tombstones are honoured whether or not sync.erase_deleted is on: an
	// erase command may have written them.
	eraser, closeEraser, err := NewEraser(ctx, cfg, wh, log)
	if err != nil {
		return nil, fmt.Errorf("erase: %w", err)
	}
	closeStore := d.close
	d.eraser, d.close = eraser, func() error { return errors.Join(closeEraser(), closeStore()) }
	if cfg.Sync.EraseDeleted && eraser == nil {
		return nil, fmt.Errorf("sync.erase_deleted: %s cannot erase responses", wh.String())
	}
	d.eraseDeleted = cfg.Sync.EraseDeleted
	var erased func(int64, survey.GUID) bool
	if eraser != nil {
		erased = eraser.Erased
	}
	fetcher := policy.Fetcher(client)
	d.pipe = newPipeline(cfg, d.onResponse, erased, fetcher, wh, log, reg)
	d.health.writes = d.pipe.WriteStatus
	d.access = newAccessWatch(client)
	d.health.access = func() error { return tokenState(nil, d.access) }
	if err := registerTokenGauge(reg, client, d.access); err != nil {
		return nil, err
	}
	d.exclude = newExcludeList(cfg.SurveysExclude, log.With("component", "webhooks"), reg)
	d.surveys = pollingSet(cfg, d.book)
	var onReconcile func(poll.ReconcileReport)
	if cfg.Verify.Interval > 0 {
		d.verifier = d.newVerifier(cfg, client, fetcher, wh, log, reg)
		onReconcile = d.verifier.reconciled
	}
	d.poller = newPoller(cfg, d.surveys, d.book.ended(), client, d.access, d.pipe, wh, onReconcile, log, reg)
	if d.verifier != nil {
		d.verifier.d.ready = d.poller.FirstPassDone()
	}
	if cfg.Webhooks.Enabled {
		d.hooks = newWebhookChecks(client, time.Now)
		d.hooks.setConfigured(cfg.Surveys)
		if d.rx, err = newReceiver(cfg, withTombstones(wh, d.eraser), &webhookProcessor{pipe: d.pipe, poller: d.poller, surveys: d.book, api: client, inv: wh.Inventory(), now: time.Now, exclude: d.exclude, checks: d.hooks}, policy, erased, log, reg); err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		if eraser != nil {
			eraser.OnErased(d.rx.Scrub) // the spool drops the responses erased from now on
		}
		d.health.checks = append(d.health.checks, func(context.Context) error { return d.rx.Ready() })
	}
	d.feeds = newFeedSlot(func(cfg *config.Config, reg prometheus.Registerer) (*feed.Runner, error) {
		if err := checkFeedDirs(cfg); err != nil {
			return nil, err
		}
		r, err := NewFeedRunner(cfg, client, wh, d.leading, log, reg)
		if err != nil {
			return nil, fmt.Errorf("feeds: %w", err)
		}
		return r, nil
	}, reg, log)
	if err := d.feeds.set(cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// onResponse is the pipeline's hook for every response it wrote: the poller
// learns its status, the survey book the survey, the copier the files. The
// poller is set before the pipeline runs.
func (d *parts) onResponse(ctx context.Context, surveyID int64, responseID survey.GUID, r *survey.Response) {
	// The poller need not fetch again what is written, whoever sent it.
	if r == nil || (d.eraseDeleted && r.ResponseStatus == survey.StatusDeleted) {
		d.poller.Observe(surveyID, responseID, survey.StatusDeleted)
		if d.eraseDeleted {
			// The erasure removes the rows and the files; the copier
			// would write index rows of them again.
			d.eraser.Deleted(ctx, surveyID, responseID)
			return
		}
		if d.copier != nil && d.leading() {
			d.copier.MarkDeleted(surveyID, responseID)
		}
		return
	}
	d.poller.Observe(surveyID, responseID, r.ResponseStatus)
	d.book.seen(surveyID, r.SurveyName)
	if d.copier != nil && d.leading() { // a new leader's copier finds the others' files in the index
		d.copier.HandleResponse(ctx, r)
	}
}

// startWork starts the pipeline, which runs until its input is closed and
// drained, and the copier and the survey book after it, until the pipeline
// is done and the work context ends.
func (d *parts) startWork(ctx context.Context) *errgroup.Group {
	work, _ := errgroup.WithContext(ctx)
	afterCtx, stopAfter := context.WithCancel(ctx)
	work.Go(func() error {
		defer stopAfter() // the pipeline hands over no more files
		return d.pipe.Run(ctx)
	})
	if d.copier != nil && d.elector == nil { // with ha, the leader runs it (runLeaderWork)
		work.Go(func() error { return d.copier.Run(afterCtx) })
	}
	work.Go(func() error { return d.book.run(afterCtx, 10*time.Second) })
	return work
}

// runIntake runs the sources until SIGTERM, a fatal error of theirs, or
// (with exitWhenSynced) the first full pass.
func (d *parts) runIntake(ctx context.Context, stop context.CancelFunc, o Options) error {
	intake, ctx := errgroup.WithContext(ctx)
	intake.Go(func() error { notifyReady(ctx, d, d.log); return nil })
	intake.Go(func() error { return d.runLeaderWork(ctx) })
	if d.eraser != nil && d.elector != nil {
		// A follower reloads the tombstones as the leader's eraser does
		// (every 10 s), so that it honours a recent erasure when a webhook
		// names the response, or when it becomes the leader.
		intake.Go(func() error { d.eraser.Watch(ctx, d.leading); return nil })
	}
	if d.rx != nil {
		intake.Go(func() error { return d.rx.Run(ctx) })
	}
	if o.Reload != nil {
		intake.Go(func() error { d.watchReload(ctx, o.Reload); return nil })
	}
	if o.ExitWhenSynced {
		intake.Go(func() error { return watchToken(ctx, d.health.client) })
		intake.Go(func() error {
			if d.waitSynced(ctx) {
				if failed := d.poller.FirstPassErrors(); len(failed) > 0 {
					stop()
					return errUnreadableSurveys(failed)
				}
				var n int64
				for _, st := range d.poller.States() {
					n += st.Synced
				}
				if o.OnSynced != nil {
					o.OnSynced(n, d.where)
				}
				stop()
			}
			return nil
		})
	}
	return intake.Wait()
}

// waitSynced reports whether the poller's first pass ended and the copier
// and the eraser drained before ctx did.
func (d *parts) waitSynced(ctx context.Context) bool {
	select {
	case <-d.poller.FirstPassDone():
	case <-ctx.Done():
		return false
	}
	for (d.copier != nil && !d.copier.Drained()) || (d.eraser != nil && !d.eraser.Idle()) {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
	return true
}
