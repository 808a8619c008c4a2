package feed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
)

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Feeds  []Options
	API    API    // the survey API client (source/surveyapi); not called by DryRun
	Ledger Ledger // the warehouse's FeedLedger()
	// Registerer receives the feed metrics; nil: not registered.
	Registerer prometheus.Registerer
	Logger     *slog.Logger     // nil: discard
	Now        func() time.Time // nil: time.Now (tests set a clock for send schedules)
	// ShutdownGrace is how long the chunk in flight may take to finish once
	// Run's context ends (default 30s). Past it the calls are cancelled and
	// their rows become uncertain.
	ShutdownGrace time.Duration
	// HTTPServer bounds the http feeds' own listeners.
	HTTPServer HTTPServerOptions
	// Leading, when set, is asked before each chunk's intents are recorded
	// and before a send is triggered: false fails the batch with
	// ErrNotLeading and nothing more is pushed (a daemon that lost the
	// lead, docs/operations.md "High availability"). nil: always true.
	Leading func() bool
}

// ErrNotLeading fails a batch when RunnerOptions.Leading turned false: its
// rows not yet begun are left to the leader.
var ErrNotLeading = errors.New("feed: this daemon no longer leads; the rest is left to the leader")

// HTTPServerOptions bound an http feed listener, so that slow or many
// clients cannot exhaust the process's file descriptors or memory (issue
// 12: a slowloris on the feed port broke webhook intake). Zero values take
// the defaults.
type HTTPServerOptions struct {
	// MaxConns caps the open connections of one listener; past it new
	// connections wait in the kernel's backlog. Default 128.
	MaxConns int
	// MaxRequests caps the requests of one listener whose bodies are read
	// and pushed at once (each holds its decoded body); a request waits up
	// to RequestWait for a slot, then gets 503 + Retry-After. Defaults 4
	// and 30 s.
	MaxRequests int
	RequestWait time.Duration
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s),
	// ReadTimeout headers and body (default 2 min), WriteTimeout writing the
	// answer once the batch is done (default 1 min; the push itself is not
	// bounded by it), IdleTimeout a kept-alive connection between requests
	// (default 1 min).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
}

func (o *HTTPServerOptions) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 128
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = 4
	}
	def(&o.RequestWait, 30*time.Second)
	def(&o.ReadHeaderTimeout, 10*time.Second)
	def(&o.ReadTimeout, 2*time.Minute)
	def(&o.WriteTimeout, time.Minute)
	def(&o.IdleTimeout, time.Minute)
}

// Runner runs the configured feeds.
type Runner struct {
	opts  RunnerOptions
	feeds map[string]*feed
	order []string
	log   *slog.Logger
}

func (o *RunnerOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	o.HTTPServer.setDefaults()
}

// NewRunner validates the feeds and builds a Runner. It does no I/O.
func NewRunner(o RunnerOptions) (*Runner, error) {
	if o.Ledger == nil {
		return nil, errors.New("feed: a ledger is required")
	}
	o.setDefaults()
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("feed: metrics: %w", err)
	}
	r := &Runner{opts: o, feeds: map[string]*feed{}, log: o.Logger}
	paths := map[string]string{}
	for _, fo := range o.Feeds {
		fo.setDefaults()
		if err := fo.validate(); err != nil {
			return nil, err
		}
		if _, dup := r.feeds[fo.Name]; dup {
			return nil, fmt.Errorf("feed %s: configured twice", fo.Name)
		}
		if fo.Type == TypeHTTP {
			k := fo.HTTP.Listen + " " + fo.HTTP.Path
			if other, dup := paths[k]; dup {
				return nil, fmt.Errorf("feed %s: http path %s already used by feed %s", fo.Name, fo.HTTP.Path, other)
			}
			paths[k] = fo.Name
		}
		r.feeds[fo.Name] = &feed{
			opts: fo, mapper: newMapper(&fo), api: o.API, ledger: o.Ledger, m: m,
			log: o.Logger, now: o.Now, grace: o.ShutdownGrace, classes: classifyCall, leading: o.Leading,
			calls: make(chan struct{}, fo.Concurrency),
		}
		r.order = append(r.order, fo.Name)
		if fo.Send.MessageID != 0 {
			m.sendFailures.WithLabelValues(fo.Name) // exists before the first failure, for alerts
		}
	}
	for _, f := range r.feeds {
		f.mapper.opts = &f.opts
	}
	return r, nil
}

// Feeds returns the configured feed names in configuration order.
func (r *Runner) Feeds() []string { return append([]string(nil), r.order...) }

func (r *Runner) feed(name string) (*feed, error) {
	f, ok := r.feeds[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownFeed, name)
	}
	return f, nil
}

// Handler serves every http feed without its own Listen address at its
// Path. Mount it at the root of a mux (the paths are absolute).
func (r *Runner) Handler() http.Handler {
	return r.handler("")
}

func (r *Runner) handler(listen string) http.Handler {
	mux := http.NewServeMux()
	for _, name := range r.order {
		f := r.feeds[name]
		if f.opts.Type == TypeHTTP && f.opts.HTTP.Listen == listen {
			mux.Handle(f.opts.HTTP.Path, f.httpHandler())
		}
	}
	return mux
}

// Run runs every feed until ctx ends: csv_dir folders are polled every
// Interval, clickhouse_query feeds run every Interval (the first run at
// start), http feeds with a Listen address get their own server (the others
// are served through Handler by the caller). A feed's failing batch is
// logged and retried at its next tick; Run returns nil when ctx ends and
// every goroutine has stopped, or an error if a listener cannot start.
func (r *Runner) Run(parent context.Context) error {
	// Each Run reads the ledgers again (at its first batch): a daemon that
	// leads again resumes from what the previous leader recorded.
	for _, f := range r.feeds {
		f.loadMu.Lock()
		f.loaded, f.loadedDry = false, false
		f.loadMu.Unlock()
	}
	// Open the listeners first: a port in use fails Run before anything starts.
	listeners := map[string]net.Listener{}
	for _, name := range r.order {
		f := r.feeds[name]
		l := f.opts.HTTP.Listen
		if f.opts.Type != TypeHTTP || l == "" || listeners[l] != nil {
			continue
		}
		ln, err := net.Listen("tcp", l)
		if err != nil {
			for _, ln := range listeners {
				ln.Close()
			}
			return fmt.Errorf("feed: http listener %s: %w", l, err)
		}
		listeners[l] = ln
	}
	g, ctx := errgroup.WithContext(parent)
	for addr, ln := range listeners {
		r.serve(ctx, g, addr, ln)
	}
	for _, name := range r.order {
		f := r.feeds[name]
		switch f.opts.Type {
		case TypeCSVDir:
			g.Go(func() error {
				r.loop(ctx, f, func(ctx context.Context) error { return csvDir{f}.poll(ctx) })
				return nil
			})
		case TypeClickHouseQuery:
			g.Go(func() error {
				r.loop(ctx, f, func(ctx context.Context) error {
					sum, err := f.runQuery(ctx, nil, false)
					if err == nil {
						f.log.Info("feed: query run", "feed", f.opts.Name, "rows", sum.Rows, "pushed", sum.Pushed,
							"skipped", sum.Skipped, "failed", sum.Failed, "invalid", sum.Invalid, "uncertain", sum.Uncertain)
					}
					return err
				})
				return nil
			})
		case TypeHTTP:
			// Load now so the first request is fast and uncertain rows are
			// reported at start; a failure is retried at the first request.
			if err := f.ensureLoaded(ctx, false); err != nil && ctx.Err() == nil {
				r.log.Error("feed: ledger not loaded; retried at the first request", "feed", name, "err", err)
			}
		}
	}
	err := g.Wait()
	if parent.Err() != nil {
		return nil
	}
	return err
}

// serve runs an HTTP server for the http feeds listening on addr until ctx
// ends, with the bounds of RunnerOptions.HTTPServer: a connection cap,
// read/write/idle timeouts and a cap on requests processed at once.
func (r *Runner) serve(ctx context.Context, g *errgroup.Group, addr string, ln net.Listener) {
	o := r.opts.HTTPServer
	ln = netutil.LimitListener(ln, o.MaxConns)
	lim := &serverLimits{shutdown: ctx, slots: make(chan struct{}, o.MaxRequests), wait: o.RequestWait, write: o.WriteTimeout}
	h := r.handler(addr)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			h.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), limitsKey{}, lim)))
		}),
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(r.log.Handler(), slog.LevelWarn),
	}
	g.Go(func() error {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("feed: http listener %s: %w", addr, err)
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.ShutdownGrace)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	r.log.Info("feed: http listening", "addr", ln.Addr().String())
}

// loop runs tick at once and then every Interval until ctx ends.
func (r *Runner) loop(ctx context.Context, f *feed, tick func(context.Context) error) {
	t := time.NewTicker(f.opts.Interval)
	defer t.Stop()
	for {
		if err := tick(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("feed: run failed; retried at the next interval", "feed", f.opts.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RunOnce processes what a feed has now and returns: a csv_dir feed its
// interrupted and waiting files, a clickhouse_query feed one run of its
// query. For `surveysync feed run NAME`.
func (r *Runner) RunOnce(ctx context.Context, name string) error {
	f, err := r.feed(name)
	if err != nil {
		return err
	}
	switch f.opts.Type {
	case TypeCSVDir:
		return csvDir{f}.poll(ctx)
	case TypeClickHouseQuery:
		_, err := f.runQuery(ctx, nil, false)
		return err
	default:
		return fmt.Errorf("feed %s: an http feed has nothing to run: it receives rows by POST", name)
	}
}

// DryRun prints what the feed would do now, without calling the API,
// claiming files or writing the ledger: for each row "push", "skip",
// "reject" or "uncertain" with the reason, then a summary and the send that
// would be triggered. A csv_dir feed reads its waiting (and interrupted)
// files; a clickhouse_query feed runs its query once.
func (r *Runner) DryRun(ctx context.Context, name string, w io.Writer) error {
	f, err := r.feed(name)
	if err != nil {
		return err
	}
	if err := f.ensureLoaded(ctx, true); err != nil {
		return err
	}
	print := func(src string) func(RowResult) {
		return func(rr RowResult) {
			verb := map[string]string{OutcomePushed: "push", OutcomeSkipped: "skip", OutcomeInvalid: "reject",
				OutcomeUncertain: "hold", OutcomeFailed: "fail"}[rr.Outcome]
			fmt.Fprintf(w, "%s:%d\t%s", src, rr.Line, verb)
			if rr.Key != "" {
				fmt.Fprintf(w, "\tkey=%s", rr.Key)
			}
			if rr.Field != "" {
				fmt.Fprintf(w, "\tfield=%s", rr.Field)
			}
			if rr.Reason != "" {
				fmt.Fprintf(w, "\t%s", rr.Reason)
			}
			fmt.Fprintln(w)
		}
	}
	summary := func(src string, s Summary) {
		fmt.Fprintf(w, "%s: %d rows: would push %d, skip %d (already pushed or repeated), reject %d (invalid), hold %d (uncertain)\n",
			src, s.Rows, s.Pushed, s.Skipped, s.Invalid, s.Uncertain)
		if s.Send != nil {
			when := "immediately"
			if s.Send.ScheduledDate != nil {
				when = "scheduled for " + s.Send.ScheduledDate.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s: would send message %d of distribution %d %s\n", src, s.Send.MessageID, s.Send.DistributionID, when)
		}
	}
	fmt.Fprintf(w, "feed %s (%s) → distribution %d, dry run: nothing is pushed, claimed or recorded\n", f.opts.Name, f.opts.Type, f.opts.DistributionID)
	switch f.opts.Type {
	case TypeCSVDir:
		d := csvDir{f}
		var files []string
		for _, sub := range []string{dirProcessing, ""} {
			dir := d.path(sub)
			keep := candidate
			if sub != "" {
				keep = func(n string) bool { return !isHidden(n) }
			}
			names, err := d.list(dir, keep)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			for _, n := range names {
				files = append(files, d.path(sub, n))
			}
		}
		if len(files) == 0 {
			fmt.Fprintf(w, "no files waiting in %s\n", f.opts.CSVDir.Dir)
		}
		for _, path := range files {
			rows, closer, err := d.openRows(path)
			if err != nil {
				fmt.Fprintf(w, "%s: unreadable, would go to failed/: %v\n", path, err)
				continue
			}
			s, err := f.runBatch(ctx, "dry-run", path, rows, print(path), true)
			closer.Close()
			if err != nil {
				return err
			}
			summary(path, s)
		}
	case TypeClickHouseQuery:
		s, err := f.runQuery(ctx, print("query"), true)
		if err != nil {
			return err
		}
		summary("query", s)
	default:
		fmt.Fprintf(w, "an http feed receives its rows by POST at %s: nothing to dry-run\n", f.opts.HTTP.Path)
	}
	return nil
}

func isHidden(n string) bool { return len(n) > 0 && n[0] == '.' }

// Uncertain lists the feed's keys whose push has an unknown outcome, for
// an operator to resolve (docs/feeds.md).
func (r *Runner) Uncertain(ctx context.Context, name string) ([]ContactEntry, error) {
	f, err := r.feed(name)
	if err != nil {
		return nil, err
	}
	last := map[string]ContactEntry{}
	err = f.ledger.LoadContacts(ctx, name, func(e ContactEntry) error {
		if e.DistributionID != f.opts.DistributionID {
			return nil
		}
		switch e.State {
		case StateUncertain, StateIntent:
			last[e.Key] = e
		case StateReleased: // undoes an open intent only (ensureLoaded)
			if l, ok := last[e.Key]; ok && l.State == StateIntent && l.Version+1 == e.Version {
				delete(last, e.Key)
			}
		default:
			delete(last, e.Key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ContactEntry, 0, len(last))
	for _, e := range last {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Resolutions of an uncertain key.
const (
	ResolvePushed = "pushed" // the operator found the contact in the service: never push it again
	ResolveRetry  = "retry"  // the operator found it missing: the next batch containing the key pushes it
)

// Resolve settles uncertain keys of a feed as the operator decided. contactID
// and surveyURL may be given for ResolvePushed (0 and "" otherwise). Run it
// while the daemon is stopped, or restart the daemon after it: a running
// Runner keeps its in-memory view (`surveysync feed resolve`).
func (r *Runner) Resolve(ctx context.Context, name string, keys []string, as string) error {
	f, err := r.feed(name)
	if err != nil {
		return err
	}
	var state string
	switch as {
	case ResolvePushed:
		state = StatePushed
	case ResolveRetry:
		state = StateFailed
	default:
		return fmt.Errorf("resolve as %q: want pushed or retry", as)
	}
	now := f.now().UTC()
	entries := make([]ContactEntry, 0, len(keys))
	f.mu.Lock()
	for _, k := range keys {
		entries = append(entries, ContactEntry{Feed: name, Key: k, DistributionID: f.opts.DistributionID, State: state,
			Error: "resolved by operator as " + as, BatchID: "resolve", UpdatedAt: now, Version: f.version(now)})
		if f.keys != nil {
			id := keyDigest(f.opts.DistributionID, k)
			if f.keys[id] == kUncertain {
				f.uncertainN--
			}
			if state == StatePushed {
				f.keys[id] = kPushed
			} else {
				delete(f.keys, id)
			}
		}
	}
	uncertain, loaded := f.uncertainN, f.keys != nil
	f.mu.Unlock()
	if loaded {
		f.m.uncertain.WithLabelValues(name).Set(float64(uncertain))
	}
	return f.ledger.RecordContacts(ctx, entries)
}
