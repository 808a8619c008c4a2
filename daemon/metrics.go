package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// The metrics listener: /metrics, /healthz, /readyz, /status/sink,
// POST /admin/resync (resync.go),
// /status/ha and, with metrics.pprof, /debug/pprof/ (remote.go is its
// client side).

// health answers /healthz and /readyz, and /status/sink (the state of
// the pipeline's writes, for surveysync status and doctor).
//
// The metrics listener starts before the warehouse is open (the start-up
// may wait for it): until Run attaches the assembled daemon's health, the
// sink is nil and /readyz lists what the start-up waits for.
type health struct {
	mu     sync.Mutex // guards sink, checks and writes, set by attach
	client *surveyapi.Client
	sink   interface{ Ping(context.Context) error }
	checks []func(context.Context) error
	writes func() pipeline.WriteStatus
	start  *startup     // what the start-up waits for; nil: nothing
	access func() error // the token's access to the surveys (access.go)
}

// attach takes the assembled daemon's sink and checks.
func (h *health) attach(o *health) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sink, h.checks, h.writes, h.access = o.sink, o.checks, o.writes, o.access
}

// parts returns the sink, the checks, the writes' status and the access
// check under the lock.
func (h *health) parts() (interface{ Ping(context.Context) error }, []func(context.Context) error, func() pipeline.WriteStatus, func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sink, h.checks, h.writes, h.access
}

func (h *health) ready(ctx context.Context) error {
	errs := h.start.errs()
	sink, checks, writes, access := h.parts()
	if h.client != nil && !h.client.Healthy() {
		errs = append(errs, fmt.Errorf("api: token rejected: %w", h.client.LastAuthError()))
	}
	if access != nil {
		if err := access(); err != nil {
			errs = append(errs, err)
		}
	}
	if sink == nil {
		if len(errs) == 0 {
			errs = append(errs, errors.New("starting: the warehouse is being opened"))
		}
		return errors.Join(errs...)
	}
	if err := sink.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("sink: %w", err))
	}
	if err := writesReady(writes); err != nil {
		errs = append(errs, err)
	}
	for _, c := range checks {
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

// serveMetrics serves the metrics listener in g until ctx ends. The
// routes of the assembled daemon (/status/ha, /admin/) are late's.
func serveMetrics(ctx context.Context, g *errgroup.Group, addr string, withPprof bool, reg *prometheus.Registry, h *health, late *lateRoutes, log *slog.Logger) error {
	writeTimeout := metricsWriteTimeout
	if withPprof {
		writeTimeout = pprofWriteTimeout
	}
	mux := metricsMux(withPprof, reg, h)
	mux.Handle(HAStatusPath, late)
	mux.Handle(HALeaderPath, late)
	mux.Handle("/admin/", late)
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
	serveUntil(ctx, g, srv, ln, "metrics server", nil)
	log.Info("metrics at /metrics, health at /healthz and /readyz", "listen", ln.Addr().String())
	return nil
}

// serveUntil serves srv on ln in g until ctx ends, then shuts it down
// (at most 5 s for the requests in flight) and calls stopped, if any.
func serveUntil(ctx context.Context, g *errgroup.Group, srv *http.Server, ln net.Listener, what string, stopped func()) {
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if stopped != nil {
			stopped()
		}
		return err
	})
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
	mux.HandleFunc("GET "+SinkStatusPath, func(w http.ResponseWriter, r *http.Request) {
		_, _, writes, _ := h.parts()
		if writes == nil {
			http.Error(w, "no pipeline", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(writes())
	})
	return mux
}

// lateRoutes serves the routes that need the assembled daemon (the HA
// status, the admin endpoints) on the metrics listener, which answers
// before (the start-up may wait for the warehouse): a request waits up to
// lateRoutesWait for the daemon, then gets 503 saying it is starting.
type lateRoutes struct {
	ready chan struct{} // closed by set
	mux   *http.ServeMux
}

const lateRoutesWait = 10 * time.Second

func newLateRoutes() *lateRoutes { return &lateRoutes{ready: make(chan struct{})} }

// set installs the routes; once.
func (l *lateRoutes) set(mux *http.ServeMux) {
	l.mux = mux
	close(l.ready)
}

func (l *lateRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(lateRoutesWait)
	defer t.Stop()
	select {
	case <-l.ready:
		l.mux.ServeHTTP(w, r)
	case <-t.C:
		http.Error(w, "starting: the daemon waits for the warehouse (see /readyz); try again later", http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}
