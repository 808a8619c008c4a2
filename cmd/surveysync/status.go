package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
)

// status prints, per survey and stream, the checkpoint read from the store.
func status(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		// A daemon that waits at start (a migration waiting for a cluster
		// node, say) says what it waits for.
		if why := daemon.NotReady(ctx, daemon.Addr(cfg)); why != "" {
			fmt.Fprintf(stdout, "daemon: running, NOT READY (answers on metrics.listen %s): %s\n", daemon.Addr(cfg), why)
		}
		fmt.Fprintf(stderr, "surveysync status: %v\nfix: %s\n", err, daemon.SinkFixFor(cfg, err))
		return exitFail
	}
	defer wh.Close()
	states, err := wh.LoadStates(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync status:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "sync state in %s\n", wh)
	now := time.Now()
	o := statusOptions{now: now, settleLag: cfg.Sync.SettleLag, pollInterval: cfg.Sync.PollInterval, daemon: daemon.Probe(ctx, cfg)}
	o.holders, o.guardKnown = daemon.Holders(ctx, cfg, wh)
	if o.daemon == daemon.StateUnknown && o.guardKnown {
		// metrics.listen is off: the lock or the lease tells.
		o.daemon = daemon.StateStopped
		if len(o.holders) > 0 {
			o.daemon = daemon.StateRunning
		}
	}
	printDaemon(stdout, cfg, o, states)
	if len(o.holders) > 0 {
		o.daemon = daemon.StateRunning // a live lease: not stopped, whatever metrics.listen says
	}
	if o.daemon == daemon.StateRunning {
		printToken(ctx, stdout, cfg)
	}
	fmt.Fprintln(stdout)
	printStates(stdout, states, o)
	printVerify(ctx, stdout, cfg, wh.VerifyLog(), now)
	printBudget(ctx, stdout, cfg)
	printSinkWrites(ctx, stdout, cfg, time.Now())
	printHA(ctx, stdout, cfg)
	return exitOK
}

type statusOptions struct {
	now          time.Time
	settleLag    time.Duration
	pollInterval time.Duration
	daemon       daemon.State
	holders      []string // the daemons holding the lock or the lease (daemon.Holders)
	guardKnown   bool     // whether holders is known
}

// lastSaved is when the daemon last saved a stream's state (zero: never).
func lastSaved(states []pipeline.StreamState) time.Time {
	var t time.Time
	for _, s := range states {
		for _, x := range []time.Time{s.UpdatedAt, s.LastRunAt} {
			if set(x) && x.After(t) {
				t = x
			}
		}
	}
	return t
}

// printDaemon says whether the daemon runs and how old its last saved
// report is: the table below is that report.
func printDaemon(w io.Writer, cfg *config.Config, o statusOptions, states []pipeline.StreamState) {
	age := "no report saved yet"
	if t := lastSaved(states); !t.IsZero() {
		age = fmt.Sprintf("last report saved %s ago (%s)", daemon.RoundDuration(o.now.Sub(t)), t.UTC().Format(time.RFC3339))
	}
	where := fmt.Sprintf("answers on metrics.listen %s", daemon.Addr(cfg))
	if daemon.Addr(cfg) == "" {
		where = "metrics.listen is off"
	}
	switch {
	case o.daemon == daemon.StateRunning && len(o.holders) > 0:
		fmt.Fprintf(w, "daemon: running (%s; %s); %s\n", where, strings.Join(o.holders, "; "), age)
	case o.daemon == daemon.StateRunning:
		fmt.Fprintf(w, "daemon: running (%s); %s\n", where, age)
	case o.daemon == daemon.StateStopped && len(o.holders) > 0:
		// Its lease is live but nothing answers here: another machine, or
		// killed less than a lease's life ago.
		fmt.Fprintf(w, "daemon: not answering on metrics.listen %s, but %s (another machine, or stopped within %s); %s\n",
			daemon.Addr(cfg), strings.Join(o.holders, "; "), daemon.LeaseExpiry, age)
	case o.daemon == daemon.StateStopped && o.guardKnown:
		guard := "no daemon holds the lock on parquet.dir"
		if len(cfg.ClickHouse.Addr) > 0 {
			guard = "no daemon holds a lease on the database"
		}
		if daemon.Addr(cfg) != "" {
			guard = "nothing answers on metrics.listen " + daemon.Addr(cfg) + ", and " + guard
		}
		fmt.Fprintf(w, "daemon: NOT RUNNING (%s); %s: the table shows where it stopped, run resumes from there\n", guard, age)
	case o.daemon == daemon.StateStopped:
		fmt.Fprintf(w, "daemon: NOT RUNNING (nothing answers on metrics.listen %s; or it runs on another machine); %s: the table shows where it stopped, run resumes from there\n", daemon.Addr(cfg), age)
	default:
		fmt.Fprintf(w, "daemon: unknown (metrics.listen is off); %s\n", age)
	}
}

// printToken says when the running daemon's API token is rejected (the
// error state of docs/operations.md, "Start-up"): nothing is synced until
// it is fixed.
func printToken(ctx context.Context, w io.Writer, cfg *config.Config) {
	m, err := daemon.Scrape(ctx, daemon.Addr(cfg), "surveysync_api_token_rejected", "surveysync_api_auth_failed")
	if err != nil || m["surveysync_api_token_rejected"] != 1 {
		return
	}
	what := "HTTP 403 on every survey: the token's account may read none of them; its streams are retried at their back-off, up to every 30 min"
	if m["surveysync_api_auth_failed"] == 1 {
		what = "HTTP 401 on every call; the daemon probes once a minute and resumes by itself"
	}
	fmt.Fprintf(w, "API TOKEN REJECTED (%s): nothing is synced. Fix: check api.token (SURVEYSYNC_API__TOKEN) and api.base_url; surveysync doctor\n", what)
}

// set reports whether a saved time is set (ClickHouse keeps a zero time as
// 1970-01-01).
func set(t time.Time) bool { return !t.IsZero() && t.Unix() > 0 }

// caughtUp reports whether the stream's last finished cycle read up to its
// end: its watermark is the cycle's start less the settle lag.
func caughtUp(s pipeline.StreamState, settleLag time.Duration) bool {
	return s.LastError == "" && set(s.LastRunAt) && set(s.Watermark) &&
		!s.Watermark.Before(s.LastRunAt.Add(-settleLag-2*time.Second))
}

// lagText is the LAG column: "synced" when the last cycle caught up (now −
// watermark would only measure the time since that cycle), else how far
// the watermark is behind.
func lagText(s pipeline.StreamState, o statusOptions) string {
	switch {
	case caughtUp(s, o.settleLag):
		// Idle and ended streams are polled far less often than
		// poll_interval: say how old "synced" is.
		if ago := o.now.Sub(s.LastRunAt); ago > o.pollInterval+time.Minute {
			return fmt.Sprintf("synced (last run %s ago)", daemon.RoundDuration(ago))
		}
		return "synced"
	case s.InCycle() && !set(s.Watermark) && o.daemon == daemon.StateStopped:
		return "stopped mid-backfill"
	case s.InCycle() && !set(s.Watermark):
		return "backfilling"
	case !set(s.Watermark):
		return "-"
	}
	return daemon.RoundDuration(o.now.Sub(s.Watermark))
}

// progressText is the PROGRESS column of a stream in a cycle: written of
// listed, percent, rate and time left.
func progressText(s pipeline.StreamState, o statusOptions) string {
	if !s.InCycle() || s.CycleListed == 0 {
		return "-"
	}
	out := fmt.Sprintf("%d/%d (%d%%)", s.CycleDone, s.CycleListed, s.CycleDone*100/s.CycleListed)
	if o.daemon == daemon.StateStopped {
		return out + " stopped" // no rate or time left: nothing runs
	}
	rate, eta := poll.Rate(s.CycleDone, s.CycleListed, s.UpdatedAt.Sub(s.CycleStartedAt))
	if rate > 0 {
		out += fmt.Sprintf(" %.1f/s", rate)
	}
	if eta > 0 {
		out += " ETA " + eta.String()
	}
	return out
}

// printBudget shows the running daemon's API spend, read from its metrics
// listener (the store does not hold it).
func printBudget(ctx context.Context, w io.Writer, cfg *config.Config) {
	fmt.Fprintln(w)
	budget := "unlimited"
	if cfg.API.MonthlyBudget > 0 {
		budget = strconv.FormatInt(cfg.API.MonthlyBudget, 10)
	}
	if cfg.Metrics.Listen == "" {
		fmt.Fprintf(w, "API budget: %s calls/month; projection unknown (metrics.listen is off)\n", budget)
		return
	}
	addr := daemon.Addr(cfg)
	if addr == "" {
		return
	}
	m, err := daemon.Scrape(ctx, addr, "surveysync_api_calls_projected_monthly",
		"surveysync_api_calls_month", "surveysync_poll_interval_stretch", "surveysync_api_calls_projected_monthly_distrusted")
	if err != nil {
		fmt.Fprintf(w, "API budget: %s calls/month; projection unknown (no daemon answering on %s)\n", budget, addr)
		return
	}
	fmt.Fprintf(w, "API calls (daemon on %s): %.0f this month by this process", addr, m["surveysync_api_calls_month"])
	proj, ok := m["surveysync_api_calls_projected_monthly"]
	switch {
	case !ok || proj < 0:
		fmt.Fprintf(w, "; projected per month: not measured yet; budget %s\n", budget)
	case cfg.API.MonthlyBudget > 0:
		fmt.Fprintf(w, "; projected %.0f/month at the current pace = %.0f%% of the budget %s; poll intervals stretched ×%.2g\n",
			proj, 100*proj/float64(cfg.API.MonthlyBudget), budget, m["surveysync_poll_interval_stretch"])
	default:
		fmt.Fprintf(w, "; projected %.0f/month at the current pace; budget unlimited\n", proj)
	}
	if d, ok := m["surveysync_api_calls_projected_monthly_distrusted"]; ok && d > 0 && proj > 0 {
		fmt.Fprintf(w, "  of which %.0f/month (%.1f%%) on list answers not believed (streams marked %q above, backing off)\n",
			d, 100*d/proj, distrustMark)
	}
}

// distrustMark flags, in the LAG column, a stream whose list answers are
// not believed (poll.NotBelieved): it backs off until they are.
const distrustMark = "NOT BELIEVED"

// printSinkWrites shows whether the running daemon's writes to the sink
// succeed, and when they fail, the table and the server's message.
func printSinkWrites(ctx context.Context, w io.Writer, cfg *config.Config, now time.Time) {
	addr := daemon.Addr(cfg)
	if addr == "" {
		fmt.Fprintln(w, "sink writes: unknown (metrics.listen is off)")
		return
	}
	st, err := daemon.RemoteWrites(ctx, addr)
	switch {
	case err != nil:
		fmt.Fprintf(w, "sink writes: unknown (no daemon answering on %s)\n", addr)
	case st.Failing:
		fmt.Fprintf(w, "sink writes (daemon on %s): FAILING for %s, %d attempts: %s\n", addr, daemon.RoundDuration(now.Sub(st.Since)), st.Attempts, daemon.RefusalText(cfg, st))
		next := "now"
		if d := st.NextRetry.Sub(now); d > 0 {
			next = "in " + daemon.RoundDuration(d)
		}
		fmt.Fprintf(w, "  the batch (%d responses) is held and written again %s; nothing acknowledged is lost, the sources wait. Fix: surveysync doctor; docs/operations.md, \"The warehouse refuses writes\"\n", st.Responses, next)
	case st.LastWrite.IsZero():
		fmt.Fprintf(w, "sink writes (daemon on %s): ok (nothing written yet by this process)\n", addr)
	default:
		fmt.Fprintf(w, "sink writes (daemon on %s): ok (last write %s ago)\n", addr, daemon.RoundDuration(now.Sub(st.LastWrite)))
	}
}

func printStates(w io.Writer, states []pipeline.StreamState, o statusOptions) {
	sort.Slice(states, func(i, j int) bool {
		if states[i].SurveyID != states[j].SurveyID {
			return states[i].SurveyID < states[j].SurveyID
		}
		return states[i].Stream < states[j].Stream
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SURVEY\tSTREAM\tWATERMARK\tLAG\tLAST RUN\tSYNCED\tPROGRESS\tLAST ERROR")
	var listed, done int64
	var start, updated time.Time
	distrusted := 0
	for _, s := range states {
		wm := "-"
		if set(s.Watermark) {
			wm = s.Watermark.UTC().Format(time.RFC3339)
		}
		last := "-"
		if set(s.LastRunAt) {
			last = s.LastRunAt.UTC().Format(time.RFC3339)
		}
		errText := s.LastError
		if errText == "" {
			errText = "-"
		}
		if s.InCycle() {
			listed += s.CycleListed
			done += s.CycleDone
			if start.IsZero() || s.CycleStartedAt.Before(start) {
				start = s.CycleStartedAt
			}
			if s.UpdatedAt.After(updated) {
				updated = s.UpdatedAt
			}
		}
		lag := lagText(s, o)
		if poll.IsResync(s.Stream) { // a resync job (docs/operations.md): its range's end is no lag
			lag = "resync pending"
			if set(s.LastRunAt) {
				lag = "resync done"
			}
		}
		if strings.HasPrefix(s.LastError, poll.NotBelieved) {
			lag = distrustMark + ", " + lag
			distrusted++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.SurveyID, s.Stream, wm, lag, last, s.Synced+s.CycleDone, progressText(s, o), errText)
	}
	if len(states) == 0 {
		fmt.Fprintln(tw, "(no stream has run yet)")
	}
	tw.Flush()
	if distrusted > 0 {
		fmt.Fprintf(w, "\n%d stream(s) %s: the service's list answers (totals, pages) do not add up, so they are polled\n"+
			"less and less often (up to every 30 min, at most 90 list calls a day each) until a pass is believed again.\n", distrusted, distrustMark)
	}
	if listed > 0 && o.daemon == daemon.StateStopped {
		fmt.Fprintf(w, "\nstopped in a cycle: %d of %d listed responses were done (%d%%) when the daemon stopped; run resumes it\n", done, listed, done*100/listed)
	} else if listed > 0 {
		pct := done * 100 / listed
		line := fmt.Sprintf("\nin progress: %d of %d listed responses done (%d%%)", done, listed, pct)
		rate, eta := poll.Rate(done, listed, updated.Sub(start))
		if rate > 0 {
			line += fmt.Sprintf(", %.1f/s", rate)
		}
		if eta > 0 {
			line += fmt.Sprintf(", about %s left", eta)
		}
		if age := o.now.Sub(updated); age > time.Minute {
			line += fmt.Sprintf(" (saved %s ago: is the daemon running?)", daemon.RoundDuration(age))
		}
		fmt.Fprintln(w, line)
	}
}

// printHA adds the election to surveysync status, as the daemon on
// metrics.listen sees it; nothing without ha.
func printHA(ctx context.Context, w io.Writer, cfg *config.Config) {
	if !cfg.HA.Enabled() {
		return
	}
	fmt.Fprintf(w, "\nhigh availability (root %s):\n", cfg.HARoot())
	s, err := daemon.RemoteHA(ctx, cfg.Metrics.Listen)
	if err != nil {
		fmt.Fprintf(w, "  the daemon on metrics.listen (%s) does not answer: %v\n", cfg.Metrics.Listen, err)
		return
	}
	role := "follower"
	if s.Leading {
		role = "LEADER"
	}
	fmt.Fprintf(w, "  this instance: %s (%s)\n", s.Instance, role)
	switch {
	case s.Leader == "":
		fmt.Fprintln(w, "  leader: none known (election in progress, or ZooKeeper unreachable)")
	case !s.Since.IsZero():
		fmt.Fprintf(w, "  leader: %s since %s (%s ago)\n", s.Leader, s.Since.Format(time.RFC3339), time.Since(s.Since).Round(time.Second))
	default:
		fmt.Fprintf(w, "  leader: %s\n", s.Leader)
	}
}

// printVerify shows, per survey, when the warehouse was last verified
// equal to the service and what the latest pass found (verify_runs, or
// _state/verify_runs.jsonl): docs/operations.md, "Verification".
func printVerify(ctx context.Context, w io.Writer, cfg *config.Config, vl warehouse.VerifyLog, now time.Time) {
	fmt.Fprintln(w)
	every := "every " + config.FormatDuration(cfg.Verify.Interval)
	if cfg.Verify.Interval <= 0 {
		every = "off (verify.interval is 0; reconcile passes still report)"
	}
	sts, err := vl.VerifyStates(ctx)
	if err != nil {
		fmt.Fprintf(w, "verification (%s): history unreadable: %v\n", every, err)
		return
	}
	fmt.Fprintf(w, "verification (%s):\n", every)
	if len(sts) == 0 {
		fmt.Fprintln(w, "  no pass recorded yet (the first comes verify.interval after the daemon's first poll pass)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SURVEY\tLAST VERIFIED CLEAN\tLAST PASS\tDRIFT (before repair)")
	for _, st := range sts {
		clean := "never"
		if !st.LastClean.IsZero() {
			clean = fmt.Sprintf("%s (%s ago)", st.LastClean.UTC().Format(time.RFC3339), daemon.RoundDuration(now.Sub(st.LastClean)))
		}
		last := fmt.Sprintf("%s %s", st.LastPass.UTC().Format(time.RFC3339), strings.ToUpper(st.Result))
		if st.Result == warehouse.VerifyClean {
			last = fmt.Sprintf("%s clean", st.LastPass.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", st.SurveyID, clean, last, driftText(st))
	}
	tw.Flush()
}

// driftText is what the latest rows of a survey found: "none", or per
// stream the missing, extra and content counts; the error of a failed
// pass.
func driftText(st warehouse.VerifyState) string {
	var parts []string
	for _, r := range st.Latest {
		if r.Result == warehouse.VerifyError && r.Error != "" {
			return "unknown: " + r.Error
		}
		var kinds []string
		for _, k := range []struct {
			n    int64
			name string
		}{{r.Missing, "missing"}, {r.Extra, "extra"}, {r.Content, "content"}} {
			if k.n > 0 {
				kinds = append(kinds, fmt.Sprintf("%d %s", k.n, k.name))
			}
		}
		if len(kinds) > 0 {
			parts = append(parts, r.Stream+": "+strings.Join(kinds, ", "))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
