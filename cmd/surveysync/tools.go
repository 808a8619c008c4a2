package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/poll"
)

// status prints, per survey and stream, the checkpoint read from the store.
func status(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	wh, err := openWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(stderr, "surveysync status:", err)
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
	o := statusOptions{now: now, settleLag: cfg.Sync.SettleLag, pollInterval: cfg.Sync.PollInterval, daemon: probeDaemon(ctx, cfg)}
	printDaemon(stdout, cfg, o, states)
	fmt.Fprintln(stdout)
	printStates(stdout, states, o)
	printBudget(ctx, stdout, cfg)
	printSinkWrites(ctx, stdout, cfg, time.Now())
	printHA(ctx, stdout, cfg)
	return exitOK
}

type statusOptions struct {
	now          time.Time
	settleLag    time.Duration
	pollInterval time.Duration
	daemon       daemonState
}

// daemonState is whether a daemon answers on metrics.listen.
type daemonState int

const (
	daemonUnknown daemonState = iota // metrics.listen is off: cannot tell
	daemonRunning
	daemonStopped // nothing answers on metrics.listen
)

// probeDaemon asks the daemon's metrics listener for /healthz.
func probeDaemon(ctx context.Context, cfg *config.Config) daemonState {
	addr := daemonAddr(cfg)
	if addr == "" {
		return daemonUnknown
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return daemonUnknown
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return daemonStopped
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return daemonStopped
	}
	return daemonRunning
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
		age = fmt.Sprintf("last report saved %s ago (%s)", roundDuration(o.now.Sub(t)), t.UTC().Format(time.RFC3339))
	}
	switch o.daemon {
	case daemonRunning:
		fmt.Fprintf(w, "daemon: running (answers on metrics.listen %s); %s\n", daemonAddr(cfg), age)
	case daemonStopped:
		fmt.Fprintf(w, "daemon: NOT RUNNING (nothing answers on metrics.listen %s; or it runs on another machine); %s: the table shows where it stopped, run resumes from there\n", daemonAddr(cfg), age)
	default:
		fmt.Fprintf(w, "daemon: unknown (metrics.listen is off); %s\n", age)
	}
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
			return fmt.Sprintf("synced (last run %s ago)", roundDuration(ago))
		}
		return "synced"
	case s.InCycle() && !set(s.Watermark) && o.daemon == daemonStopped:
		return "stopped mid-backfill"
	case s.InCycle() && !set(s.Watermark):
		return "backfilling"
	case !set(s.Watermark):
		return "-"
	}
	return roundDuration(o.now.Sub(s.Watermark))
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// progressText is the PROGRESS column of a stream in a cycle: written of
// listed, percent, rate and time left.
func progressText(s pipeline.StreamState, o statusOptions) string {
	if !s.InCycle() || s.CycleListed == 0 {
		return "-"
	}
	out := fmt.Sprintf("%d/%d (%d%%)", s.CycleDone, s.CycleListed, s.CycleDone*100/s.CycleListed)
	if o.daemon == daemonStopped {
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

// daemonAddr is where status and doctor find the running daemon: its
// metrics listener, with a wildcard host replaced by loopback; "" when
// metrics.listen is off or unreadable.
func daemonAddr(cfg *config.Config) string {
	if cfg.Metrics.Listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(cfg.Metrics.Listen)
	if err != nil {
		return ""
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
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
	addr := daemonAddr(cfg)
	if addr == "" {
		return
	}
	m, err := scrape(ctx, "http://"+addr+"/metrics", "surveysync_api_calls_projected_monthly",
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

// sinkStatusPath serves the running daemon's pipeline.WriteStatus as JSON
// on its metrics listener, beside /metrics.
const sinkStatusPath = "/status/sink"

// daemonWrites reads the running daemon's write status from its metrics
// listener.
func daemonWrites(ctx context.Context, addr string) (pipeline.WriteStatus, error) {
	var st pipeline.WriteStatus
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+sinkStatusPath, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", sinkStatusPath, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
	return st, err
}

// refusalText is a failing write in one line: where, the server's code
// and message.
func refusalText(cfg *config.Config, st pipeline.WriteStatus) string {
	table := st.Table
	if table == "" {
		table = "(not named by the sink)"
	} else if len(cfg.ClickHouse.Addr) > 0 {
		table = cfg.ClickHouse.Database + "." + table
	}
	verb := "writes to " + table + " fail (transient: the sink is unreachable or overloaded; it heals by itself)"
	if st.Class == pipeline.WriteRefused {
		verb = "the warehouse refuses writes to " + table
	}
	code := ""
	if st.Code != 0 {
		code = fmt.Sprintf("code %d: ", st.Code)
	}
	return fmt.Sprintf("%s: %s%s", verb, code, st.Message)
}

// printSinkWrites shows whether the running daemon's writes to the sink
// succeed, and when they fail, the table and the server's message.
func printSinkWrites(ctx context.Context, w io.Writer, cfg *config.Config, now time.Time) {
	addr := daemonAddr(cfg)
	if addr == "" {
		fmt.Fprintln(w, "sink writes: unknown (metrics.listen is off)")
		return
	}
	st, err := daemonWrites(ctx, addr)
	switch {
	case err != nil:
		fmt.Fprintf(w, "sink writes: unknown (no daemon answering on %s)\n", addr)
	case st.Failing:
		fmt.Fprintf(w, "sink writes (daemon on %s): FAILING for %s, %d attempts: %s\n", addr, roundDuration(now.Sub(st.Since)), st.Attempts, refusalText(cfg, st))
		next := "now"
		if d := st.NextRetry.Sub(now); d > 0 {
			next = "in " + roundDuration(d)
		}
		fmt.Fprintf(w, "  the batch (%d responses) is held and written again %s; nothing acknowledged is lost, the sources wait. Fix: surveysync doctor; docs/operations.md, \"The warehouse refuses writes\"\n", st.Responses, next)
	case st.LastWrite.IsZero():
		fmt.Fprintf(w, "sink writes (daemon on %s): ok (nothing written yet by this process)\n", addr)
	default:
		fmt.Fprintf(w, "sink writes (daemon on %s): ok (last write %s ago)\n", addr, roundDuration(now.Sub(st.LastWrite)))
	}
}

// scrape reads the named unlabelled samples of a Prometheus text page.
func scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
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
	if listed > 0 && o.daemon == daemonStopped {
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
			line += fmt.Sprintf(" (saved %s ago: is the daemon running?)", roundDuration(age))
		}
		fmt.Fprintln(w, line)
	}
}

// doctor checks what the daemon needs and prints one line per check.
func doctor(ctx context.Context, cfg *config.Config, stdout io.Writer) int {
	failed := 0
	report := func(name string, err error, fix string) {
		if err == nil {
			fmt.Fprintf(stdout, "ok    %s\n", name)
			return
		}
		failed++
		fmt.Fprintf(stdout, "FAIL  %s: %v\n      fix: %s\n", name, err, fix)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	log := newLogger(cfg, io.Discard)
	reg := prometheus.NewRegistry()

	if cfg.Demo.Emulator.Enabled {
		fmt.Fprintln(stdout, "info  demo.emulator.enabled: run starts the built-in emulator; no API checks")
	} else {
		client, err := newClient(cfg, log, reg)
		if err == nil {
			defer client.Close()
			err = client.Ping(ctx)
		}
		report("api token against "+cfg.API.BaseURL.String(), err,
			"check api.token (SURVEYSYNC_API__TOKEN) and api.base_url; the account needs API access")
		if err == nil {
			for _, id := range cfg.Surveys {
				_, lerr := client.ListResponses(ctx, id, survey.ListQuery{Page: 1, PerPage: 1})
				if lerr != nil && surveyUnreadable(lerr) {
					lerr = errors.New(describeUnreadable(lerr))
				}
				report(fmt.Sprintf("survey %d", id), lerr,
					"check the id in surveys (the number in the survey's URL in the web app) and that the token's account may read it")
			}
		}
	}

	wh, err := openWarehouse(ctx, cfg, log, reg)
	where := ""
	if err == nil {
		where = wh.String()
		defer wh.Close()
	}
	if len(cfg.ClickHouse.Addr) > 0 {
		report("clickhouse "+fmt.Sprint(cfg.ClickHouse.Addr)+" ("+where+")", err,
			"check clickhouse.addr (native port, usually 9000), username, password, and that the user may CREATE in clickhouse.database")
	} else {
		report("sink "+where, err, "check parquet.dir is writable")
	}

	if err == nil {
		for _, c := range wh.CheckWrites(ctx) {
			report("writes to "+c.Table, describeRefusal(c.Err), c.Fix)
		}
	}
	daemonRuns := false
	if addr := daemonAddr(cfg); addr != "" {
		// The running daemon's own writes, when one answers.
		st, derr := daemonWrites(ctx, addr)
		daemonRuns = derr == nil
		if daemonRuns && st.Failing {
			report(fmt.Sprintf("the daemon on %s writing its batches", addr), fmt.Errorf("%s (failing for %s, %d attempts)", refusalText(cfg, st), roundDuration(time.Since(st.Since)), st.Attempts),
				"fix the table or grants named here (the lines above say more); the daemon retries by itself, slowly, and loses nothing: docs/operations.md, \"The warehouse refuses writes\"")
		}
	}
	if cfg.HA.Enabled() {
		el, herr := ha.Probe(ctx, cfg.HA.Servers, cfg.HARoot(), 5*time.Second)
		report(fmt.Sprintf("ha servers %s (election under %s)", strings.Join(cfg.HA.Servers, ","), cfg.HARoot()), herr,
			"check ha.servers: the client port (usually 2181) of the ZooKeeper or ClickHouse Keeper ensemble, reachable from this machine")
		if herr == nil {
			switch len(el.Candidates) {
			case 0:
				fmt.Fprintln(stdout, "info  ha: no instance campaigns yet")
			default:
				fmt.Fprintf(stdout, "info  ha: %d instance(s) campaigning, %s leads\n", len(el.Candidates), el.Candidates[0])
			}
		}
	}
	if cfg.Files.Enabled {
		report("object store "+cfg.Files.URL.String(), checkBlob(ctx, cfg), "check files.url and its credentials; the daemon writes under surveys/")
	}
	if daemonRuns {
		// Its listeners hold the addresses: that is no failure.
		fmt.Fprintf(stdout, "info  listen addresses not checked: a surveysync daemon answers on metrics.listen %s\n", daemonAddr(cfg))
	}
	for _, l := range listeners(cfg) {
		if daemonRuns {
			break
		}
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			ln.Close()
		}
		report(l.what+" "+l.addr, err, "pick a free address for "+l.key+" or stop what holds the port")
	}
	for i, f := range cfg.Feeds {
		name := fmt.Sprintf("feed %s (feeds[%d], %s)", f.Name, i, f.Type)
		switch f.Type {
		case config.FeedCSVDir:
			report(name+" folder "+f.CSVDir.Dir, feed.CheckDir(f.CSVDir.Dir),
				fmt.Sprintf("create the folder (mkdir -p %s) or set feeds[%d].csv_dir.dir", f.CSVDir.Dir, i))
		case config.FeedClickHouseQuery:
			var qerr error
			if err == nil && wh.QueryConn() != nil {
				qerr = checkQuery(ctx, wh.QueryConn(), f.ClickHouseQuery.Query)
			} else {
				qerr = errors.New("needs a reachable ClickHouse (clickhouse.addr)")
			}
			report(name+" query", qerr, fmt.Sprintf("fix feeds[%d].clickhouse_query.query: it must run on clickhouse.addr as clickhouse.username", i))
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return exitFail
	}
	fmt.Fprintln(stdout, "all checks passed")
	return exitOK
}

// describeRefusal shortens a WriteCheck error to the server's code and
// message.
func describeRefusal(err error) error {
	var we *pipeline.WriteError
	if !errors.As(err, &we) {
		return err
	}
	if we.Code != 0 {
		return fmt.Errorf("refuses inserts: code %d: %s", we.Code, we.Message)
	}
	return fmt.Errorf("refuses inserts: %s", we.Message)
}

// listener is an address the daemon listens on.
type listener struct{ what, key, addr string }

// listeners lists every address run binds, once each (http feeds may share
// one).
func listeners(cfg *config.Config) []listener {
	var out []listener
	seen := map[string]bool{}
	add := func(what, key, addr string) {
		if addr == "" || seen[addr] {
			return
		}
		seen[addr] = true
		out = append(out, listener{what, key, addr})
	}
	if cfg.Webhooks.Enabled {
		add("webhook listener", "webhooks.listen", cfg.Webhooks.Listen)
	}
	add("metrics listener", "metrics.listen", cfg.Metrics.Listen)
	if cfg.Demo.Emulator.Enabled {
		add("emulator listener", "demo.emulator.listen", cfg.Demo.Emulator.Listen)
	}
	for i, f := range cfg.Feeds {
		if f.Type == config.FeedHTTP {
			add("feed "+f.Name+" listener", fmt.Sprintf("feeds[%d].http.listen", i), f.HTTP.Listen)
		}
	}
	return out
}

// checkQuery runs a feed's query with no rows wanted: the database, tables
// and columns must exist and be readable.
func checkQuery(ctx context.Context, conn record.QueryConn, query string) error {
	rows, err := conn.Query(ctx, "SELECT * FROM ("+strings.TrimRight(strings.TrimSpace(query), ";")+") LIMIT 0")
	if err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
