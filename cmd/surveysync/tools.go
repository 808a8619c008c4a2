package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline"
)

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return ""
}

// status prints, per survey and stream, the checkpoint read from the store.
func status(ctx context.Context, cfg *config.Config, stdout, stderr io.Writer) int {
	log := newLogger(cfg, stderr)
	st, _, where, err := openStore(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(stderr, "surveysync status:", err)
		return exitFail
	}
	defer st.(closer).Close()
	states, err := st.LoadStates(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync status:", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "sync state in %s\n\n", where)
	printStates(stdout, states, time.Now())
	printBudget(ctx, stdout, cfg)
	return exitOK
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
	host, port, err := net.SplitHostPort(cfg.Metrics.Listen)
	if err != nil {
		return
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, port)
	m, err := scrape(ctx, "http://"+addr+"/metrics", "surveysync_api_calls_projected_monthly",
		"surveysync_api_calls_month", "surveysync_poll_interval_stretch")
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

func printStates(w io.Writer, states []pipeline.StreamState, now time.Time) {
	sort.Slice(states, func(i, j int) bool {
		if states[i].SurveyID != states[j].SurveyID {
			return states[i].SurveyID < states[j].SurveyID
		}
		return states[i].Stream < states[j].Stream
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SURVEY\tSTREAM\tWATERMARK\tLAG\tLAST RUN\tSYNCED\tLAST ERROR")
	for _, s := range states {
		lag := "-"
		wm := "-"
		if !s.Watermark.IsZero() {
			wm = s.Watermark.UTC().Format(time.RFC3339)
			lag = now.Sub(s.Watermark).Truncate(time.Second).String()
		}
		last := "-"
		if !s.LastRunAt.IsZero() {
			last = s.LastRunAt.UTC().Format(time.RFC3339)
		}
		errText := s.LastError
		if errText == "" {
			errText = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", s.SurveyID, s.Stream, wm, lag, last, s.Synced, errText)
	}
	if len(states) == 0 {
		fmt.Fprintln(tw, "(no stream has run yet)")
	}
	tw.Flush()
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
		fmt.Fprintln(stdout, "info  demo.emulator.enabled: the API checks run against the built-in emulator")
	} else {
		client, err := newClient(cfg, log, reg)
		if err == nil {
			err = client.Ping(ctx)
		}
		report("api token against "+cfg.API.BaseURL.String(), err,
			"check api.token (SURVEYSYNC_API__TOKEN) and api.base_url; the account needs API access")
	}

	if len(cfg.ClickHouse.Addr) > 0 {
		st, _, where, err := openStore(ctx, cfg, log, reg)
		if err == nil {
			st.(closer).Close()
		}
		report("clickhouse "+fmt.Sprint(cfg.ClickHouse.Addr)+" ("+where+")", err,
			"check clickhouse.addr (native port, usually 9000), username, password, and that the user may CREATE in clickhouse.database")
	} else {
		_, _, where, err := openStore(ctx, cfg, log, reg)
		report("sink "+where, err, "check parquet.dir is writable")
	}

	if cfg.Files.Enabled {
		report("object store "+cfg.Files.URL.String(), checkBlob(ctx, cfg), "check files.url and its credentials; the daemon writes under surveys/")
	}
	if cfg.Webhooks.Enabled {
		ln, err := net.Listen("tcp", cfg.Webhooks.Listen)
		if err == nil {
			ln.Close()
		}
		report("webhook listener "+cfg.Webhooks.Listen, err, "pick a free webhooks.listen address or stop what holds the port")
	}
	if cfg.Metrics.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err == nil {
			ln.Close()
		}
		report("metrics listener "+cfg.Metrics.Listen, err, "pick a free metrics.listen address")
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return exitFail
	}
	fmt.Fprintln(stdout, "all checks passed")
	return exitOK
}
