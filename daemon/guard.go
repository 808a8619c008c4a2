package daemon

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/dirlock"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// The single-instance guard (docs/operations.md, "One daemon per data
// directory or database"): two daemons started by mistake on the same
// Parquet folder or the same ClickHouse database would write every
// response twice and double the API calls. The Parquet folder is locked
// on disk (internal/dirlock: flock, released by the kernel when the
// process dies); a ClickHouse database holds a lease per daemon in its
// instances table, renewed every LeaseHeartbeat. With ha: the election
// decides who works, several daemons on one database are the point, and
// neither guard applies.

// LeaseHeartbeat is how often a daemon renews its lease; a lease not
// renewed for leaseMissed heartbeats is free.
const (
	LeaseHeartbeat = 10 * time.Second
	leaseMissed    = 3
	// leaseSettle is how long a starting daemon waits after writing its
	// lease before it looks again for one written at the same moment.
	leaseSettle = time.Second
)

// LeaseExpiry is the age past which a lease counts as free.
const LeaseExpiry = leaseMissed * LeaseHeartbeat

// lockDataDir locks parquet.dir for this daemon when it writes Parquet
// files (nil otherwise: ClickHouse has the lease, ha the election).
func lockDataDir(cfg *config.Config, log *slog.Logger) (*dirlock.Lock, error) {
	if cfg.HA.Enabled() || len(cfg.ClickHouse.Addr) > 0 {
		return nil, nil
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		return nil, fmt.Errorf("parquet.dir %s: %w", cfg.Parquet.Dir, err)
	}
	l, err := dirlock.Acquire(dir, dirlock.Self(time.Now()))
	if err != nil {
		return nil, fmt.Errorf("parquet.dir %w", err)
	}
	log.Debug("data directory locked", "dir", dir, "file", dirlock.FileName)
	return l, nil
}

// LeaseHeldError is the refusal to start while another daemon's lease on
// the database is live.
type LeaseHeldError struct {
	Where  string // the warehouse
	Others []warehouse.Lease
}

func (e *LeaseHeldError) Error() string {
	o := e.Others[0]
	more := ""
	if len(e.Others) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(e.Others)-1)
	}
	return fmt.Sprintf("another surveysync daemon writes %s: host %s, pid %d, started %s, last heartbeat %s ago%s; "+
		"two daemons on one database write every response twice and double the API calls. "+
		"Stop that one (its lease is released when it stops, and expires %s after a crash), "+
		"or start with --force if you are sure it is gone; for several daemons on purpose configure ha (docs/operations.md)",
		e.Where, o.Host, o.PID, o.Started.UTC().Format(time.RFC3339), RoundDuration(o.HeartbeatAge), more, LeaseExpiry)
}

// lease is this daemon's lease on the warehouse and its heartbeat.
type lease struct {
	store  warehouse.Leases
	me     warehouse.Lease
	where  string
	log    *slog.Logger
	others prometheus.Gauge
	warned map[string]bool // other instances already logged
}

// takeLease claims the warehouse for this daemon (nil without leases or
// with ha). It refuses while another daemon's lease is live, unless force;
// a lease of this host whose process is gone (a crash, a container
// restarted with the same pid) is free at once.
func takeLease(ctx context.Context, cfg *config.Config, wh warehouse.Warehouse, force bool, version string, log *slog.Logger, reg prometheus.Registerer) (*lease, error) {
	store := wh.Leases()
	if cfg.HA.Enabled() || store == nil {
		return nil, nil
	}
	host, _ := os.Hostname()
	l := &lease{store: store, where: wh.String(), log: log.With("component", "lease"), warned: map[string]bool{},
		me: warehouse.Lease{ID: randomID(), Host: host, PID: os.Getpid(), Started: time.Now().UTC().Truncate(time.Second), Version: version},
		others: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "surveysync_instance_others",
			Help: "Other surveysync daemons holding a live lease on this daemon's ClickHouse database (0 unless one was started with --force); not set with ha.",
		})}
	if reg != nil {
		if err := reg.Register(l.others); err != nil {
			return nil, err
		}
	}
	// Two daemons starting at the same moment both see no lease, write
	// theirs, and see each other on the second look: each steps back and
	// tries again after a random wait, so the first to come back wins.
	for try := 1; ; try++ {
		others, err := l.live(ctx)
		if err != nil {
			return nil, err
		}
		if len(others) > 0 && !force {
			return nil, &LeaseHeldError{Where: l.where, Others: others}
		}
		for _, o := range others {
			l.log.Warn("--force: starting although another daemon holds a live lease on the database",
				"host", o.Host, "pid", o.PID, "started", o.Started.UTC().Format(time.RFC3339), "heartbeat_age", o.HeartbeatAge)
			l.warned[o.ID] = true
		}
		if err := store.Renew(ctx, l.me); err != nil {
			return nil, err
		}
		if force {
			break
		}
		if err := backoff.Sleep(ctx, leaseSettle); err != nil {
			return nil, err
		}
		if others, err = l.live(ctx); err != nil {
			return nil, err
		}
		if len(others) == 0 {
			break
		}
		_ = store.Release(ctx, l.me)
		if try == 3 {
			return nil, &LeaseHeldError{Where: l.where, Others: others}
		}
		wait := leaseSettle + rand.N(4*leaseSettle)
		l.log.Info("another daemon took a lease on the database at the same moment; trying again", "in", wait)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
	l.log.Info("lease taken: this daemon writes the database; a second one would be refused",
		"instance", l.me.ID, "heartbeat", LeaseHeartbeat, "expires_after", LeaseExpiry)
	return l, nil
}

// live are the other daemons' live leases: renewed within LeaseExpiry,
// not released, and not of a process of this host that is gone.
func (l *lease) live(ctx context.Context) ([]warehouse.Lease, error) {
	all, err := l.store.Live(ctx, LeaseExpiry)
	if err != nil {
		return nil, err
	}
	var out []warehouse.Lease
	for _, o := range all {
		if o.ID == l.me.ID {
			continue
		}
		if o.Host == l.me.Host && (o.PID == l.me.PID || !processAlive(o.PID)) {
			if !l.warned[o.ID] {
				l.log.Info("the lease of a daemon of this host that is gone is free", "pid", o.PID,
					"started", o.Started.UTC().Format(time.RFC3339), "heartbeat_age", o.HeartbeatAge)
				l.warned[o.ID] = true
			}
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// start renews the lease every LeaseHeartbeat until stop is called (or
// ctx ends); stop then releases it and returns once it is released, before
// the caller closes the warehouse. A daemon appearing on the same database
// meanwhile (started with --force) is logged once and counted in
// surveysync_instance_others.
func (l *lease) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.heartbeat(ctx)
		rctx, cancelRelease := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancelRelease()
		if err := l.store.Release(rctx, l.me); err != nil {
			l.log.Warn("lease not released (it expires by itself)", "after", LeaseExpiry, "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

func (l *lease) heartbeat(ctx context.Context) {
	t := time.NewTicker(LeaseHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.store.Renew(ctx, l.me); err != nil {
			if ctx.Err() == nil {
				l.log.Warn("lease not renewed; trying again at the next heartbeat", "err", err)
			}
			continue
		}
		others, err := l.live(ctx)
		if err != nil {
			continue
		}
		l.others.Set(float64(len(others)))
		for _, o := range others {
			if !l.warned[o.ID] {
				l.warned[o.ID] = true
				l.log.Error("another surveysync daemon writes the same database: every response is written twice and the API calls double; stop one",
					"host", o.Host, "pid", o.PID, "started", o.Started.UTC().Format(time.RFC3339))
			}
		}
	}
}

// processAlive reports whether a process with this pid runs on this
// machine (a signal 0 reaches it, or it exists but is not ours).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// Holders describes the daemons that hold the warehouse now, as the
// single-instance guard sees them — the Parquet folder's lock, or the live
// leases in ClickHouse — for surveysync status and doctor. known is false
// when the guard cannot tell (ha, or the leases cannot be read).
func Holders(ctx context.Context, cfg *config.Config, wh warehouse.Warehouse) (holders []string, known bool) {
	if cfg.HA.Enabled() {
		return nil, false
	}
	if store := wh.Leases(); store != nil {
		live, err := store.Live(ctx, LeaseExpiry)
		if err != nil {
			return nil, false
		}
		for _, o := range live {
			holders = append(holders, fmt.Sprintf("host %s, pid %d, started %s, lease renewed %s ago",
				o.Host, o.PID, o.Started.UTC().Format(time.RFC3339), RoundDuration(o.HeartbeatAge)))
		}
		return holders, true
	}
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		return nil, false
	}
	if held, h := dirlock.Held(dir); held {
		holders = append(holders, h.String()+", holds the lock on parquet.dir")
	}
	return holders, true
}
