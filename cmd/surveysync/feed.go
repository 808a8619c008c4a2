package main

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/source/feed"
)

// feedRun runs one feed once; with dryRun it prints what would be pushed
// and why rows would be skipped or rejected, calling nothing.
func feedRun(ctx context.Context, cfg *config.Config, name string, dryRun bool, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	reg := prometheus.NewRegistry()
	found := false
	for _, f := range cfg.Feeds {
		found = found || f.Name == name
	}
	if !found {
		fmt.Fprintf(stderr, "surveysync feed run: no feed named %q in the configuration\n", name)
		return exitUsage
	}
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, reg)
	if err != nil {
		fmt.Fprintf(stderr, "surveysync feed run: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer wh.Close()
	var api feed.API
	if !dryRun {
		if cfg.Demo.Emulator.Enabled {
			fmt.Fprintln(stderr, "surveysync feed run: pushing needs the real service (demo.emulator.enabled is on); use --dry-run")
			return exitUsage
		}
		c, err := daemon.NewClient(cfg, log, reg)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync feed run:", err)
			return exitFail
		}
		defer c.Close()
		api = c
	}
	r, err := daemon.NewFeedRunner(cfg, api, wh, nil, log, reg)
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
	log := daemon.NewLogger(cfg, stderr)
	reg := prometheus.NewRegistry()
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, reg)
	if err != nil {
		fmt.Fprintf(stderr, "surveysync feed: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer wh.Close()
	r, err := daemon.NewFeedRunner(cfg, nil, wh, nil, log, reg)
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
