package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/survey"
)

type resyncFlags struct {
	survey   int64
	from, to string
}

// parseDay reads a --from/--to value: 2006-01-02 (midnight UTC) or RFC 3339.
func parseDay(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want 2006-01-02 or 2006-01-02T15:04:05Z", flag, v)
	}
	return t, nil
}

// resync is surveysync resync: the running daemon queues the job (it
// answers on metrics.listen), else this process runs it and exits.
func resync(ctx context.Context, cfg *config.Config, f resyncFlags, stdout, stderr io.Writer) int {
	if f.survey <= 0 {
		fmt.Fprintln(stderr, "surveysync resync: --survey ID is required")
		return exitUsage
	}
	from, err := parseDay("from", f.from)
	if err == nil {
		var to time.Time
		if to, err = parseDay("to", f.to); err == nil {
			return resyncRange(ctx, cfg, f.survey, from, to, stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "surveysync resync:", err)
	return exitUsage
}

func resyncRange(ctx context.Context, cfg *config.Config, id int64, from, to time.Time, stdout, stderr io.Writer) int {
	if daemon.Probe(ctx, cfg) == daemon.StateRunning {
		addr := daemon.Addr(cfg)
		token, err := daemon.AdminToken(cfg)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync resync: a daemon answers at", addr+":", err)
			return exitFail
		}
		job, err := daemon.RemoteResync(ctx, addr, token, id, from, to)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync resync:", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "surveysync: the daemon at %s queued %s; follow it with surveysync status (rows %s…)\n", addr, jobText(job), "resync/")
		return exitOK
	}
	if cfg.Demo.Emulator.Enabled {
		fmt.Fprintln(stderr, "surveysync resync: the demo's emulator lives inside a running daemon: start surveysync run (with metrics.listen on) and resync while it runs, or give a configuration with api.base_url and api.token")
		return exitFail
	}
	log := daemon.NewLogger(cfg, stderr)
	job, err := daemon.ResyncOnce(ctx, cfg, log, id, from, to)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync resync:", err)
		if len(job.Streams) > 0 {
			fmt.Fprintln(stderr, "surveysync resync: the job is saved: the next surveysync run or resync goes on with it")
		}
		return exitFail
	}
	fmt.Fprintf(stdout, "surveysync: %s done: every response of the range is written again\n", jobText(job))
	return exitOK
}

func jobText(j poll.ResyncJob) string {
	return fmt.Sprintf("a resync of survey %d from %s to %s (%s)", j.Survey, survey.FormatTime(j.From), survey.FormatTime(j.To),
		strings.Join(j.Streams, ", "))
}
