package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/source/feed"
)

// feedSlot runs the feed runner of the configuration in force, and swaps
// it for another at a reload (reload.go): the running one stops as at a
// shutdown (its chunks in flight finish, its ledger records them), then
// the new one starts and reads the ledgers again, so no row is pushed
// twice. With no feeds it idles until a reload brings some.
type feedSlot struct {
	build func(cfg *config.Config, reg prometheus.Registerer) (*feed.Runner, error)
	reg   prometheus.Registerer
	log   *slog.Logger

	mu      sync.Mutex
	cur     *feed.Runner           // nil: no feeds
	metrics []prometheus.Collector // what cur registered
	change  chan struct{}
}

func newFeedSlot(build func(*config.Config, prometheus.Registerer) (*feed.Runner, error), reg prometheus.Registerer, log *slog.Logger) *feedSlot {
	return &feedSlot{build: build, reg: reg, log: log, change: make(chan struct{}, 1)}
}

// collecting is a Registerer that remembers what it registered, so that a
// replaced runner's metrics can be unregistered before the next registers
// the same names.
type collecting struct {
	prometheus.Registerer
	got *[]prometheus.Collector
}

func (c collecting) Register(x prometheus.Collector) error {
	if err := c.Registerer.Register(x); err != nil {
		return err
	}
	*c.got = append(*c.got, x)
	return nil
}

func (c collecting) MustRegister(xs ...prometheus.Collector) {
	for _, x := range xs {
		if err := c.Register(x); err != nil {
			panic(err)
		}
	}
}

// set builds the runner of cfg's feeds (none: nil) and makes it the one
// Run runs. The caller checked cfg with check first.
func (s *feedSlot) set(cfg *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reg != nil {
		for _, c := range s.metrics {
			s.reg.Unregister(c)
		}
	}
	s.metrics = nil
	s.cur = nil
	if len(cfg.Feeds) > 0 {
		var reg prometheus.Registerer
		if s.reg != nil {
			reg = collecting{s.reg, &s.metrics}
		}
		r, err := s.build(cfg, reg)
		if err != nil {
			return err
		}
		s.cur = r
	}
	select {
	case s.change <- struct{}{}:
	default:
	}
	return nil
}

// check reports whether cfg's feeds can be built (nothing registered).
func (s *feedSlot) check(cfg *config.Config) error {
	if len(cfg.Feeds) == 0 {
		return nil
	}
	_, err := s.build(cfg, nil)
	return err
}

func (s *feedSlot) runner() *feed.Runner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Run runs the current runner until ctx ends, restarting with the new one
// after set; it returns a runner's error (a listener that cannot start).
func (s *feedSlot) Run(ctx context.Context) error {
	select { // the first runner was set before Run: no restart for it
	case <-s.change:
	default:
	}
	for {
		r := s.runner()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		if r != nil {
			go func() { done <- r.Run(rctx) }()
		}
		select {
		case err := <-done:
			cancel()
			return err
		case <-s.change:
			cancel()
			if r != nil {
				if err := <-done; err != nil {
					s.log.Warn("feeds: the replaced runner stopped with an error", "err", err)
				}
			}
			s.log.Info("feeds: restarted with the reloaded configuration")
		case <-ctx.Done():
			cancel()
			if r != nil {
				return <-done
			}
			return nil
		}
	}
}

// checkFeedDirs checks that every csv_dir feed's folder can be used.
func checkFeedDirs(cfg *config.Config) error {
	for i, f := range cfg.Feeds {
		if f.Type == config.FeedCSVDir {
			if err := feed.CheckDir(f.CSVDir.Dir); err != nil {
				return fmt.Errorf("feed %s (feeds[%d]): %w", f.Name, i, err)
			}
		}
	}
	return nil
}
