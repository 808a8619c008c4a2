package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/feed"
)

// feedOptions maps the configuration's feeds onto source/feed's options.
func feedOptions(cfg *config.Config, conn feed.QueryConn) ([]feed.Options, error) {
	out := make([]feed.Options, 0, len(cfg.Feeds))
	for i, f := range cfg.Feeds {
		o := feed.Options{
			Name:           f.Name,
			Type:           f.Type,
			DistributionID: f.DistributionID,
			Channel:        f.Channel,
			Mapping:        f.Mapping,
			Salutation: feed.Salutation{
				Generate:         f.Salutation.Generate,
				PrefixMale:       f.Salutation.PrefixMale,
				PrefixFemale:     f.Salutation.PrefixFemale,
				IncludeFirstName: f.Salutation.IncludeFirstName,
				IncludeLastName:  f.Salutation.IncludeLastName,
			},
			DedupeKey:   f.DedupeKey,
			Interval:    f.Interval,
			Concurrency: f.Concurrency,
			CSVDir:      feed.CSVDirOptions{Dir: f.CSVDir.Dir, Delimiter: f.CSVDir.Delimiter},
			HTTP:        feed.HTTPOptions{Path: f.HTTP.Path, Token: f.HTTP.Token.Value(), Listen: f.HTTP.Listen, MaxBodyBytes: int64(f.HTTP.MaxBodyBytes)},
			Send: feed.SendOptions{
				MessageID: f.Send.MessageID,
				Schedule: feed.Schedule{
					Policy: f.Send.Schedule.Policy,
					Delay:  f.Send.Schedule.Delay,
					Window: feed.Window{From: f.Send.Schedule.Window.From, To: f.Send.Schedule.Window.To, TimeZone: f.Send.Schedule.Window.TimeZone},
				},
			},
		}
		for _, d := range f.Send.Schedule.Window.Days {
			wd, err := config.ParseWeekday(d)
			if err != nil {
				return nil, fmt.Errorf("feeds[%d].send.schedule.window.days: %w", i, err)
			}
			o.Send.Schedule.Window.Days = append(o.Send.Schedule.Window.Days, wd)
		}
		if f.Type == config.FeedClickHouseQuery {
			if conn == nil {
				return nil, fmt.Errorf("feeds[%d] (%s) is a clickhouse_query feed but clickhouse.addr is not set", i, f.Name)
			}
			o.ClickHouseQuery = feed.QueryOptions{Query: f.ClickHouseQuery.Query, Conn: conn}
		}
		out = append(out, o)
	}
	return out, nil
}

// newFeedRunner builds the feed runner with the warehouse's ledger.
func newFeedRunner(cfg *config.Config, api feed.API, wh warehouse.Warehouse, leading func() bool, log *slog.Logger, reg prometheus.Registerer) (*feed.Runner, error) {
	ledger, err := wh.FeedLedger()
	if err != nil {
		return nil, fmt.Errorf("feed ledger: %w", err)
	}
	opts, err := feedOptions(cfg, wh.QueryConn())
	if err != nil {
		return nil, err
	}
	grace := cfg.Shutdown.DrainTimeout
	if cfg.HA.Enabled() {
		// A daemon that loses the lead lets its chunks in flight finish for
		// at most this long: before another daemon can lead (fencing,
		// docs/operations.md "High availability").
		grace = min(grace, cfg.HA.SessionTimeout/4)
	}
	return feed.NewRunner(feed.RunnerOptions{
		Feeds: opts, API: api, Ledger: ledger, Registerer: reg,
		Logger: log.With("component", "feed"), ShutdownGrace: grace, Leading: leading,
	})
}

// feedRun runs one feed once; with dryRun it prints what would be pushed
// and why rows would be skipped or rejected, calling nothing.
func feedRun(ctx context.Context, cfg *config.Config, name string, dryRun bool, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	reg := prometheus.NewRegistry()
	found := false
	for _, f := range cfg.Feeds {
		found = found || f.Name == name
	}
	if !found {
		fmt.Fprintf(stderr, "surveysync feed run: no feed named %q in the configuration\n", name)
		return exitUsage
	}
	wh, err := openWarehouse(ctx, cfg, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync feed run:", err)
		return exitFail
	}
	defer wh.Close()
	var api feed.API
	if !dryRun {
		if cfg.Demo.Emulator.Enabled {
			fmt.Fprintln(stderr, "surveysync feed run: pushing needs the real service (demo.emulator.enabled is on); use --dry-run")
			return exitUsage
		}
		c, err := newClient(cfg, log, reg)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync feed run:", err)
			return exitFail
		}
		defer c.Close()
		api = c
	}
	r, err := newFeedRunner(cfg, api, wh, nil, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync feed run:", err)
		return exitFail
	}
	if dryRun {
		err = r.DryRun(ctx, name, stdout)
	} else {
		err = r.RunOnce(ctx, name)
	}
	if err != nil {
		fmt.Fprintln(stderr, "surveysync feed run:", err)
		return exitFail
	}
	return exitOK
}

// feedResolve lists a feed's uncertain rows, or settles some of them as the
// operator decided (docs/feeds.md, "Uncertain rows"). Run it while the
// daemon is stopped.
func feedResolve(ctx context.Context, cfg *config.Config, name, as string, keys []string, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	reg := prometheus.NewRegistry()
	wh, err := openWarehouse(ctx, cfg, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync feed:", err)
		return exitFail
	}
	defer wh.Close()
	r, err := newFeedRunner(cfg, nil, wh, nil, log, reg)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync feed:", err)
		return exitFail
	}
	if as == "" {
		rows, err := r.Uncertain(ctx, name)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync feed uncertain:", err)
			return exitFail
		}
		for _, e := range rows {
			fmt.Fprintf(stdout, "%s\tbatch %s\t%s:%d\t%s\n", e.Key, e.BatchID, e.File, e.Line, e.Error)
		}
		fmt.Fprintf(stdout, "%d uncertain row(s) in feed %s\n", len(rows), name)
		return exitOK
	}
	if err := r.Resolve(ctx, name, keys, as); err != nil {
		fmt.Fprintln(stderr, "surveysync feed resolve:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%d key(s) of feed %s resolved as %s\n", len(keys), name, as)
	return exitOK
}
