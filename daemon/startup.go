package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// The start-up policy (docs/operations.md, "Start-up"): the warehouse or
// the API unreachable when the daemon starts is waited out with back-off,
// as an outage during a run is, one log line per attempt and /readyz
// saying what it waits for. A one-shot run (--exit-when-synced), doctor
// and the read-only commands fail at once instead, with doctor's fix.

// The start-up's back-off: 1 s after the first failure, doubling up to
// 30 s (internal/backoff, with its jitter).
const (
	startRetryInitial = time.Second
	startRetryMax     = 30 * time.Second
)

// Doctor's fix lines, shared with the commands that fail on the same
// thing.
const (
	clickHouseFix = "check clickhouse.addr (native port, usually 9000), username, password, and that the user may CREATE in clickhouse.database"
	parquetFix    = "check parquet.dir is writable"
	apiFix        = "check api.base_url and that this machine reaches the service (surveysync doctor checks it)"
)

// SinkFix is doctor's fix line for a warehouse that cannot be opened.
func SinkFix(cfg *config.Config) string {
	if len(cfg.ClickHouse.Addr) > 0 {
		return clickHouseFix
	}
	return parquetFix
}

// SinkFixFor is the fix line for err, a failure to open the warehouse: what
// err says is wrong when it knows (a cluster node that has not run a
// migration, another daemon applying them), else SinkFix.
func SinkFixFor(cfg *config.Config, err error) string {
	var (
		cde  *clickhouse.ClusterDDLError
		busy *clickhouse.MigrationsBusyError
	)
	switch {
	case errors.As(err, &cde):
		return cde.Fix()
	case errors.As(err, &busy):
		return busy.Fix()
	}
	return SinkFix(cfg)
}

// startup is what the daemon's start still waits for, by name; /readyz
// lists it.
type startup struct {
	mu      sync.Mutex
	waiting map[string]error
}

func (s *startup) set(what string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == nil {
		s.waiting = map[string]error{}
	}
	if err == nil {
		delete(s.waiting, what)
		return
	}
	s.waiting[what] = err
}

func (s *startup) errs() []error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.waiting))
	for n := range s.waiting {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]error, 0, len(names))
	for _, n := range names {
		out = append(out, s.waiting[n])
	}
	return out
}

// openWarehouseWaiting opens the warehouse; while ClickHouse is
// unreachable, a cluster node has not run a migration's statement
// (clickhouse.ClusterDDLError) or another daemon applies the migrations
// (clickhouse.MigrationsBusyError) it waits with back-off, unless
// failFast (which still waits for another daemon's migrations). Any other
// error, and every error with failFast, is returned with the fix.
func openWarehouseWaiting(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer, st *startup, failFast bool) (warehouse.Warehouse, error) {
	t0 := time.Now()
	for n := 1; ; n++ {
		wh, err := openWarehouse(ctx, cfg, log, reg, true)
		if err == nil {
			st.set("warehouse", nil)
			if n > 1 {
				log.Info("start-up: the warehouse answers; starting", "attempts", n, "waited", time.Since(t0).Round(time.Second))
			}
			return wh, nil
		}
		// Another daemon applying the migrations is waited for even by
		// a one-shot run: it ends by itself (the holder finishes, fails
		// and releases, or its claim expires).
		var busy *clickhouse.MigrationsBusyError
		if ctx.Err() != nil || (!errors.As(err, &busy) && (failFast || !clickhouse.Unreachable(err))) {
			return nil, fmt.Errorf("open sink: %w; fix: %s", err, SinkFixFor(cfg, err))
		}
		if n == 1 {
			// Under systemd (Type=notify, TimeoutStartSec) the start is
			// done: the daemon runs and correctly waits, as notify.go says
			// of an outage; a start timeout must not kill it.
			sdNotify(log, sddaemon.SdNotifyReady+"\nSTATUS=waiting for the warehouse (start-up)")
		}
		wait := waitStartup(log, st, cfg, n, err)
		if serr := backoff.Sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("open sink: stopped while waiting for the warehouse (last: %w): %w", err, serr)
		}
	}
}

// The start-up's back-off while the migrations wait for a cluster node or
// for another daemon: their checks cost one read (nothing new is queued on
// the cluster meanwhile), so the ceiling is lower than an unreachable
// server's and the daemon starts soon after the node is back.
var (
	clusterWaitPolicy = backoff.Policy{Initial: startRetryInitial, Max: 10 * time.Second}
	busyWaitPolicy    = backoff.Policy{Initial: startRetryInitial, Max: 5 * time.Second}
)

// waitStartup logs the n-th failed attempt to open the warehouse (err),
// says it on /readyz, and returns the wait before the next one.
func waitStartup(log *slog.Logger, st *startup, cfg *config.Config, n int, err error) time.Duration {
	var (
		cde  *clickhouse.ClusterDDLError
		busy *clickhouse.MigrationsBusyError
	)
	switch {
	case errors.As(err, &cde):
		wait := clusterWaitPolicy.Delay(n)
		attrs := []any{"cluster", cde.Cluster, "nodes", cde.Nodes, "migration", cde.Migration}
		if !cde.Pending {
			attrs = append(attrs, "statement", cde.Statement) // else the statement queued before, named by query
		}
		attrs = append(attrs, "query", cde.Query, "attempt", n, "retry_in", wait.Round(100*time.Millisecond), "err", cde.Err, "fix", cde.Fix())
		log.Warn("start-up: the cluster has not run a migration on every node; waiting for it (nothing is read from the service meanwhile)", attrs...)
		st.set("warehouse", fmt.Errorf("starting: %s (attempt %d, next in %s)", cde.Summary(), n, wait.Round(time.Second)))
		return wait
	case errors.As(err, &busy):
		wait := busyWaitPolicy.Delay(n)
		log.Info("start-up: another surveysync applies the migrations; waiting for it",
			"host", busy.Host, "pid", busy.PID, "for", busy.Since, "attempt", n, "retry_in", wait.Round(100*time.Millisecond))
		st.set("warehouse", fmt.Errorf("starting: %w (attempt %d, next in %s)", busy, n, wait.Round(time.Second)))
		return wait
	}
	policy := backoff.Policy{Initial: startRetryInitial, Max: startRetryMax}
	wait := policy.Delay(n)
	log.Warn("start-up: the warehouse is unreachable; waiting for it (nothing is read from the service meanwhile)",
		"attempt", n, "retry_in", wait.Round(100*time.Millisecond), "err", err, "fix", SinkFix(cfg))
	st.set("warehouse", fmt.Errorf("starting: the warehouse is unreachable (attempt %d, next in %s): %w", n, wait.Round(time.Second), err))
	return wait
}

// newProbe is a client for the start-up's pings: one attempt each (the
// start-up's back-off is the retry; the daemon's client would retry
// api.max_retries times inside one ping), its metrics apart from the
// daemon's.
func newProbe(cfg *config.Config, log *slog.Logger) (*surveyapi.Client, error) {
	c := *cfg
	c.API.MaxRetries = -1
	return NewClient(&c, log, prometheus.NewRegistry())
}

// apiAnswered reports whether a Ping error means the service answered:
// nil, a rejected token (the client's 401 state takes over: /readyz, the
// alert, a probe a minute) or a quota pause (402: the client waits).
func apiAnswered(err error) bool {
	return err == nil || errors.Is(err, surveyapi.ErrUnauthorized) || errors.Is(err, surveyapi.ErrQuotaExceeded)
}

// checkAPIOnce is the one-shot run's start: the service must answer now.
func checkAPIOnce(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	c, err := newProbe(cfg, log)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	defer c.Close()
	err = c.Ping(ctx)
	switch {
	case errors.Is(err, surveyapi.ErrUnauthorized):
		return errTokenRejected(c)
	case apiAnswered(err):
		return nil
	}
	return fmt.Errorf("the survey service at %s does not answer: %w; fix: %s", cfg.API.BaseURL.String(), err, apiFix)
}

// waitAPI is the daemon's start: it asks the service (one Ping per
// attempt) until it answers, with back-off, logging each attempt and
// keeping /readyz unready meanwhile. The sources run anyway: their calls
// fail and back off as during an outage, and the webhook receiver spools.
func waitAPI(ctx context.Context, cfg *config.Config, st *startup, log *slog.Logger) {
	c, err := newProbe(cfg, log)
	if err != nil {
		log.Warn("start-up: no client to ask the survey service", "err", err)
		return
	}
	defer c.Close()
	policy := backoff.Policy{Initial: startRetryInitial, Max: startRetryMax}
	t0 := time.Now()
	for n := 1; ; n++ {
		err := c.Ping(ctx)
		if ctx.Err() != nil {
			return
		}
		if apiAnswered(err) {
			st.set("api", nil)
			if n > 1 {
				log.Info("start-up: the survey service answers", "attempts", n, "waited", time.Since(t0).Round(time.Second))
			}
			return
		}
		wait := policy.Delay(n)
		log.Warn("start-up: the survey service does not answer; waiting for it", "api", cfg.API.BaseURL.String(),
			"attempt", n, "retry_in", wait.Round(100*time.Millisecond), "err", err, "fix", apiFix)
		st.set("api", fmt.Errorf("starting: the survey service does not answer (attempt %d, next in %s): %w", n, wait.Round(time.Second), err))
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
	}
}
