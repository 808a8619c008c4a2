package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/ha"
)

// HAStatusPath serves the election's state (ha.Status) as JSON on the
// metrics listener, for surveysync status; 404 without ha.
const HAStatusPath = "/status/ha"

// HALeaderPath answers 200 on the leader and 503 elsewhere (404 without
// ha): the health check for a load balancer in front of the http feeds,
// whose listeners are open on the leader only.
const HALeaderPath = "/status/ha/leader"

// newElector builds the elector of ha.servers; nil without them.
func newElector(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (*ha.Elector, error) {
	if !cfg.HA.Enabled() {
		return nil, nil
	}
	instance := cfg.HA.Instance
	if instance == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("ha.instance: empty and no host name: %w", err)
		}
		instance = h
	}
	e, err := ha.New(ha.Options{
		Servers: cfg.HA.Servers, SessionTimeout: cfg.HA.SessionTimeout, Root: cfg.HARoot(), Instance: instance,
		Auth:   HAAuth(cfg),
		Logger: log.With("component", "ha"), Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	log.Info("ha: campaigning for the lead", "servers", cfg.HA.Servers, "root", cfg.HARoot(), "instance", instance,
		"session_timeout", cfg.HA.SessionTimeout, "auth", HAAuth(cfg).String())
	if !HAAuth(cfg).Set() {
		log.Warn("ha: no ZooKeeper authentication (ha.username, ha.password): the election's znodes are open to every client of the ensemble, which can delete them and take or stop the lead",
			"root", cfg.HARoot())
	}
	return e, nil
}

// HAAuth is the ZooKeeper authentication of ha.username and ha.password.
func HAAuth(cfg *config.Config) ha.Auth {
	return ha.Auth{Username: cfg.HA.Username, Password: cfg.HA.Password.Value()}
}

// leaderRestartWait is how long a leader waits before it starts its failed
// leader work again (a fixed wait: the log line names it).
const leaderRestartWait = 5 * time.Second

// leading reports whether this daemon does leader work now: always without
// ha.
func (d *parts) leading() bool { return d.elector == nil || d.elector.Leading() }

// runLeaderWork runs what only one daemon of an account may run — the
// poller (with reconcile), the verification, the feeds and, with ha, the
// file copier —
// until ctx ends: at once without ha, else each time this daemon gains the
// lead, stopped (and waited for) when it loses it.
func (d *parts) runLeaderWork(ctx context.Context) error {
	if d.elector == nil {
		return d.leaderWork(ctx, false)
	}
	return d.elector.Run(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			err := d.leaderWork(ctx, true)
			if ctx.Err() != nil {
				return
			}
			d.log.Error("ha: leader work failed; started again in 5s while this daemon leads", "err", err)
			_ = backoff.Sleep(ctx, leaderRestartWait)
		}
	})
}

func (d *parts) leaderWork(ctx context.Context, withCopier bool) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.poller.Run(ctx) })
	if d.feeds != nil {
		g.Go(func() error { return d.feeds.Run(ctx) })
	}
	if withCopier && d.copier != nil {
		g.Go(func() error { return d.copier.Run(ctx) })
	}
	if d.verifier != nil { // verify.interval: on the leader, beside the poller whose repairs it uses
		g.Go(func() error { return d.verifier.run(ctx) })
	}
	if d.eraser != nil { // the leader erases; the others reload the tombstones (runIntake)
		g.Go(func() error { return d.eraser.Run(ctx) })
	}
	return g.Wait()
}

// serveHAStatus adds HAStatusPath to the metrics mux.
func serveHAStatus(mux *http.ServeMux, e *ha.Elector) {
	mux.HandleFunc("GET "+HAStatusPath, func(w http.ResponseWriter, r *http.Request) {
		if e == nil {
			http.Error(w, "no ha", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(e.Status())
	})
	mux.HandleFunc("GET "+HALeaderPath, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case e == nil:
			http.Error(w, "no ha", http.StatusNotFound)
		case e.Leading():
			_, _ = io.WriteString(w, "leader\n")
		default:
			http.Error(w, "follower: leader work (polling, feeds and their listeners, file copies) runs on the leader", http.StatusServiceUnavailable)
		}
	})
}
