package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/webhookrx"
)

type runFlags struct {
	exitWhenSynced bool
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// startEmulator runs the built-in emulator on loopback and points the API
// configuration at it.
func startEmulator(ctx context.Context, g *errgroup.Group, cfg *config.Config, log *slog.Logger) (*sim.Sim, error) {
	e := cfg.Demo.Emulator
	specs := make([]sim.SurveySpec, e.Surveys)
	ids := make([]int64, e.Surveys)
	for i := range specs {
		id := int64(4574 + i)
		specs[i] = sim.SurveySpec{ID: id, Responses: e.ResponsesPerSurvey, Seed: e.Seed + int64(i), Files: cfg.Files.Enabled}
		ids[i] = id
	}
	token := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	so := sim.Options{Token: token, Surveys: specs, Logger: log.With("component", "emulator")}
	if cfg.Webhooks.Enabled {
		// Like the service, the emulator posts webhooks to the daemon,
		// including response_received for responses completing from now on.
		so.WebhookURL = "http://" + cfg.Webhooks.Listen + cfg.Webhooks.Path.Value()
		so.WebhookLive = true
	}
	s, err := sim.New(so)
	if err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	ln, err := net.Listen("tcp", e.Listen)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("start emulator: listen on demo.emulator.listen %s: %w", e.Listen, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("emulator: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		s.Close()
		return err
	})
	cfg.API.BaseURL = config.URL("http://" + ln.Addr().String() + "/v1")
	cfg.API.Token = config.Secret(token)
	cfg.API.RateLimit = 0 // the emulator is local: no reason to throttle the demo
	if cfg.API.UserAgent == "" {
		cfg.API.UserAgent = config.DemoUserAgent
	}
	if len(cfg.Surveys) == 0 {
		cfg.Surveys = ids
	}
	log.Info("built-in emulator of the survey service started", "base_url", string(cfg.API.BaseURL),
		"surveys", e.Surveys, "responses_per_survey", e.ResponsesPerSurvey)
	return s, nil
}

func newClient(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*surveyapi.Client, error) {
	return surveyapi.New(surveyapi.Options{
		BaseURL:        cfg.API.BaseURL.Value(),
		Token:          cfg.API.Token.Value(),
		UserAgent:      cfg.API.UserAgent,
		MaxConcurrency: cfg.API.MaxConcurrency,
		RateLimit:      cfg.API.RateLimit,
		Timeout:        cfg.API.Timeout,
		MaxRetries:     cfg.API.MaxRetries,
		QuotaPause:     cfg.API.QuotaPause,
		Logger:         log.With("component", "api"),
		Registerer:     reg,
	})
}

// openWarehouse opens ClickHouse when configured, else the Parquet directory.
func openWarehouse(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (warehouse.Warehouse, error) {
	p, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}
	wh, err := openBackend(ctx, cfg, log, reg)
	if err != nil {
		return nil, err
	}
	return withPrivacy(wh, p), nil
}

// openBackend opens the warehouse's backend (openWarehouse adds the
// privacy rules of its webhook log and feed ledger).
func openBackend(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (warehouse.Warehouse, error) {
	if len(cfg.ClickHouse.Addr) > 0 {
		return clickhouse.OpenWarehouse(ctx, clickhouseOptions(cfg, log, reg))
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		return nil, err
	}
	return parquet.OpenWarehouse(parquet.Options{Dir: dir, Logger: log.With("component", "parquet")})
}

// clickhouseOptions maps the clickhouse section of the configuration onto
// the sink's options.
func clickhouseOptions(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) clickhouse.Options {
	return clickhouse.Options{
		Addr:            cfg.ClickHouse.Addr,
		Database:        cfg.ClickHouse.Database,
		Username:        cfg.ClickHouse.Username,
		Password:        cfg.ClickHouse.Password.Value(),
		Cluster:         cfg.ClickHouse.Cluster,
		Secure:          cfg.ClickHouse.Secure,
		DialTimeout:     cfg.ClickHouse.DialTimeout,
		Unreplicated:    !cfg.ClickHouse.Replicated,
		ZooKeeperPrefix: cfg.ClickHouse.ZooKeeperPrefix,
		DDLTimeout:      cfg.ClickHouse.DDLTimeout,
		InsertQuorum:    cfg.ClickHouse.InsertQuorum,
		Wide:            clickhouse.WideOptions{ChoiceIDs: cfg.Wide.ChoiceIDs, Names: cfg.Wide.ViewNames()},
		Logger:          log.With("component", "clickhouse"),
		Registerer:      reg,
	}
}

func runDaemon(ctx context.Context, cfg *config.Config, fl runFlags, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	if err := daemon(ctx, cfg, fl, log, stdout); err != nil {
		log.Error("surveysync stopped with an error", "err", err)
		fmt.Fprintln(stderr, "surveysync run:", err)
		return exitFail
	}
	return exitOK
}

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT
// is not set: the live heap of a sync is about 150 MiB at the default batch
// size, and without a limit the collector lets the heap grow to twice that
// before it runs (docs/architecture.md, "Memory").
const defaultMemoryLimit = 256 << 20

func daemon(rootCtx context.Context, cfg *config.Config, fl runFlags, log *slog.Logger, stdout io.Writer) error {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	reg := newRegistry()

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
	client, err := newClient(cfg, log, reg)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	wh, err := openWarehouse(intakeCtx, cfg, log, reg)
	if err != nil {
		return fmt.Errorf("open sink: %w", err)
	}
	defer wh.Close()
	d, err := assemble(intakeCtx, cfg, client, wh, log, reg)
	if err != nil {
		return err
	}
	defer d.close()
	if cfg.Metrics.Listen != "" {
		if err := serveMetrics(svcCtx, svc, cfg.Metrics.Listen, cfg.Metrics.Pprof, reg, d.health, d.elector, log); err != nil {
			return err
		}
	}
	log.Info("surveysync started", "version", readBuildInfo().Version, "sink", wh.String(), "surveys", len(d.surveys), "api", cfg.API.BaseURL)

	work := d.startWork(workCtx)
	go notifyReady(intakeCtx, d, log)
	intakeErr := d.runIntake(intakeCtx, cancelIntake, fl, cfg, stdout)
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
	if intakeErr != nil {
		return intakeErr
	}
	if workErr != nil && !errors.Is(workErr, context.Canceled) {
		return workErr
	}
	log.Info("surveysync stopped cleanly")
	return nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "surveysync_build_info", Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	reg.MustRegister(buildInfo)
	b := readBuildInfo()
	buildInfo.WithLabelValues(b.Version, b.GoVersion).Set(1)
	return reg
}

// parts are the daemon's components, wired to one warehouse. The optional
// ones (copier, rx, feeds) are nil when not configured.
type parts struct {
	pipe    *pipeline.Pipeline
	poller  *poll.Poller
	book    *surveyBook
	copier  *blob.Copier
	rx      *webhookrx.Receiver
	feeds   *feed.Runner
	health  *health
	elector *ha.Elector // nil without ha: this daemon leads
	log     *slog.Logger
	surveys []int64
	where   string
	close   func() error // closes the files store
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
	d = &parts{health: &health{client: client, sink: wh}, where: wh.String(), log: log, close: func() error { return nil }}
	built := d // an error return sets d to nil
	defer func() {
		if err != nil {
			built.close()
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
	d.pipe = pipeline.New(pipeline.Options{
		OnResponse:       d.onResponse,
		FetchConcurrency: cfg.Sync.FetchConcurrency,
		MaxRows:          cfg.Sync.Batch.MaxRows,
		MaxBytes:         int(cfg.Sync.Batch.MaxBytes),
		MaxDelay:         cfg.Sync.Batch.MaxDelay,
		Rejects:          wh,
		Logger:           log.With("component", "pipeline"),
		Registerer:       reg,
	}, policy.Fetcher(client), wh)
	d.health.writes = d.pipe.WriteStatus
	d.surveys = pollingSet(cfg, d.book)
	d.poller = poll.New(poll.Options{
		Surveys:               d.surveys,
		Ended:                 d.book.ended(),
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
		BackfillFrom:          cfg.Sync.BackfillFrom,
		Unreadable:            surveyUnreadable,
		Logger:                log.With("component", "poll"),
		Registerer:            reg,
	}, client, d.pipe, wh, wh.Inventory())
	if cfg.Webhooks.Enabled {
		if d.rx, err = newReceiver(cfg, wh, &webhookProcessor{pipe: d.pipe, poller: d.poller, surveys: d.book, api: client, inv: wh.Inventory(), now: time.Now}, log, reg); err != nil {
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		d.health.checks = append(d.health.checks, func(context.Context) error { return d.rx.Ready() })
	}
	if len(cfg.Feeds) > 0 {
		for i, f := range cfg.Feeds {
			if f.Type == config.FeedCSVDir {
				if err := feed.CheckDir(f.CSVDir.Dir); err != nil {
					return nil, fmt.Errorf("feed %s (feeds[%d]): %w", f.Name, i, err)
				}
			}
		}
		if d.feeds, err = newFeedRunner(cfg, client, wh, d.leading, log, reg); err != nil {
			return nil, fmt.Errorf("feeds: %w", err)
		}
	}
	return d, nil
}

// onResponse is the pipeline's hook for every response it wrote: the poller
// learns its status, the survey book the survey, the copier the files. The
// poller is set before the pipeline runs.
func (d *parts) onResponse(ctx context.Context, surveyID int64, responseID survey.GUID, r *survey.Response) {
	// The poller need not fetch again what is written, whoever sent it.
	if r == nil {
		d.poller.Observe(surveyID, responseID, survey.StatusDeleted)
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
func (d *parts) runIntake(ctx context.Context, stop context.CancelFunc, fl runFlags, cfg *config.Config, stdout io.Writer) error {
	intake, ctx := errgroup.WithContext(ctx)
	intake.Go(func() error { return d.runLeaderWork(ctx) })
	if d.rx != nil {
		intake.Go(func() error { return d.rx.Run(ctx) })
	}
	if fl.exitWhenSynced {
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
				fmt.Fprintf(stdout, "surveysync: every survey is caught up (%d responses synced in all); the data is in %s\n", n, d.where)
				printWhereToLook(stdout, cfg)
				stop()
			}
			return nil
		})
	}
	return intake.Wait()
}

// waitSynced reports whether the poller's first pass ended and the copier
// drained before ctx did.
func (d *parts) waitSynced(ctx context.Context) bool {
	select {
	case <-d.poller.FirstPassDone():
	case <-ctx.Done():
		return false
	}
	for d.copier != nil && !d.copier.Drained() {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// newReceiver builds the webhook receiver; it logs events in the
// warehouse's webhook log when the warehouse has one.
func newReceiver(cfg *config.Config, wh warehouse.Warehouse, p webhookrx.Processor, log *slog.Logger, reg prometheus.Registerer) (*webhookrx.Receiver, error) {
	w := cfg.Webhooks
	return webhookrx.New(webhookrx.Options{
		Listen:                 w.Listen,
		Path:                   w.Path.Value(),
		BasicAuthUser:          w.BasicAuth.Username,
		BasicAuthPassword:      w.BasicAuth.Password.Value(),
		AllowCIDRs:             w.AllowCIDRs,
		StandardWebhooksSecret: w.StandardWebhooksSecret.Value(),
		RequireSignature:       w.RequireSignature,
		SignatureTolerance:     w.SignatureTolerance,
		MaxBodyBytes:           int64(w.MaxBodyBytes),
		SpoolDir:               w.SpoolDir,
		SpoolMaxEvents:         w.SpoolMaxEvents,
		SpoolMaxBytes:          int64(w.SpoolMaxBytes),
		Logger:                 log.With("component", "webhooks"),
		Registerer:             reg,
	}, p, wh.WebhookLog())
}

// pollingSet is the configured surveys plus those learned earlier (from
// webhooks or synced responses) that have not ended.
func pollingSet(cfg *config.Config, book *surveyBook) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, id := range append(append([]int64(nil), cfg.Surveys...), book.active()...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func printWhereToLook(w io.Writer, cfg *config.Config) {
	if len(cfg.ClickHouse.Addr) > 0 {
		fmt.Fprintf(w, "  clickhouse-client --query 'SELECT response_status, count() FROM %s.responses_current GROUP BY response_status'\n", cfg.ClickHouse.Database)
		return
	}
	dir := cfg.Parquet.Dir
	fmt.Fprintf(w, "  responses: %s\n  answers:   %s\n", filepath.Join(dir, flatten.TableResponses), filepath.Join(dir, flatten.TableAnswers))
	if cfg.Files.Enabled {
		fmt.Fprintf(w, "  uploaded files: %s (index: %s)\n", cfg.Files.URL, filepath.Join(dir, "uploaded_files.jsonl"))
	}
	fmt.Fprintf(w, "  look at it: surveysync query --parquet-dir %s\n", dir)
	fmt.Fprintf(w, "  or DuckDB (current rows: latest version per response, deleted excluded; docs/parquet.md):\n")
	fmt.Fprintf(w, "    duckdb -c \"SELECT response_status, count(*) FROM (SELECT * FROM read_parquet('%s/responses/**/*.parquet', hive_partitioning = false) QUALIFY row_number() OVER (PARTITION BY response_id ORDER BY _version DESC) = 1) WHERE is_deleted = 0 GROUP BY 1\"\n", dir)
}

// health answers /healthz and /readyz, and /status/sink (the state of
// the pipeline's writes, for surveysync status and doctor).
type health struct {
	client *surveyapi.Client
	sink   interface{ Ping(context.Context) error }
	checks []func(context.Context) error
	writes func() pipeline.WriteStatus
}

func (h *health) ready(ctx context.Context) error {
	var errs []error
	if !h.client.Healthy() {
		errs = append(errs, fmt.Errorf("api: token rejected: %w", h.client.LastAuthError()))
	}
	if err := h.sink.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("sink: %w", err))
	}
	if err := writesReady(h.writes); err != nil {
		errs = append(errs, err)
	}
	for _, c := range h.checks {
		if err := c(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// The metrics listener's bounds: Prometheus and probes need few
// connections and answer fast; a CPU profile or trace (pprof on) streams
// for its ?seconds= (30 s by default), so writes get more room then.
const (
	metricsMaxConns     = 64
	metricsWriteTimeout = 30 * time.Second
	pprofWriteTimeout   = 2 * time.Minute
)

func serveMetrics(ctx context.Context, g *errgroup.Group, addr string, withPprof bool, reg *prometheus.Registry, h *health, e *ha.Elector, log *slog.Logger) error {
	writeTimeout := metricsWriteTimeout
	if withPprof {
		writeTimeout = pprofWriteTimeout
	}
	mux := metricsMux(withPprof, reg, h)
	serveHAStatus(mux, e)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics.listen %s: %w", addr, err)
	}
	ln = netutil.LimitListener(ln, metricsMaxConns)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	log.Info("metrics at /metrics, health at /healthz and /readyz", "listen", ln.Addr().String())
	return nil
}

// surveyUnreadable reports whether a list error means the survey cannot be
// read with this token at all: not found (404) or forbidden (403).
func surveyUnreadable(err error) bool {
	return errors.Is(err, survey.ErrNotFound) || errors.Is(err, surveyapi.ErrForbidden)
}

// describeUnreadable is the short reason a survey cannot be read:
// "not found (HTTP 404)".
func describeUnreadable(err error) string {
	var ae *surveyapi.APIError
	status := 0
	if errors.As(err, &ae) {
		status = ae.Status
	}
	what := "cannot be read"
	switch {
	case errors.Is(err, survey.ErrNotFound):
		what = "not found"
	case errors.Is(err, surveyapi.ErrForbidden):
		what = "forbidden (the token's account may not read it)"
	}
	if status != 0 {
		return fmt.Sprintf("%s (HTTP %d)", what, status)
	}
	return what
}

// errUnreadableSurveys is the error of --exit-when-synced when configured
// surveys cannot be read: one line per survey.
func errUnreadableSurveys(failed map[int64]error) error {
	ids := make([]int64, 0, len(failed))
	for id := range failed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "survey %d: %s", id, describeUnreadable(failed[id]))
	}
	b.WriteString(": check the ids in surveys and the token's account")
	return errors.New(b.String())
}

// metricsMux serves /metrics, /healthz, /readyz, /status/sink and, with
// withPprof only, /debug/pprof/.
func metricsMux(withPprof bool, reg *prometheus.Registry, h *health) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if withPprof {
		// Go's profiler, for operators chasing CPU or memory: only with
		// metrics.pprof (metrics.listen is loopback by default; expose it
		// with care).
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := h.ready(cctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET "+sinkStatusPath, func(w http.ResponseWriter, r *http.Request) {
		if h.writes == nil {
			http.Error(w, "no pipeline", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h.writes())
	})
	return mux
}

// reconcileInterval maps sync.reconcile_interval to poll's option: 0 in the
// configuration disables reconcile, where poll takes 0 as its default and
// a negative interval as "off".
func reconcileInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
