package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/dirlock"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/survey"
)

// Check is one finding of Doctor: a check (Name, its error or nil, and
// what to do when it failed), or, with Info set, a fact worth saying.
type Check struct {
	Name string
	Err  error
	Fix  string
	Info string
}

// Doctor checks what the daemon needs — the API token and every survey
// id, the sink and its writes, the running daemon's writes, the HA
// servers, the object store, the listen addresses, every feed's source —
// and hands each finding to report, in order, as it is made.
func Doctor(ctx context.Context, cfg *config.Config, report func(Check)) {
	check := func(name string, err error, fix string) { report(Check{Name: name, Err: err, Fix: fix}) }
	info := func(format string, args ...any) { report(Check{Info: fmt.Sprintf(format, args...)}) }
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	log := NewLogger(cfg, io.Discard)
	reg := prometheus.NewRegistry()

	if cfg.Demo.Emulator.Enabled {
		info("demo.emulator.enabled: run starts the built-in emulator; no API checks")
	} else {
		client, err := NewClient(cfg, log, reg)
		if err == nil {
			defer client.Close()
			err = client.Ping(ctx)
		}
		check("api token against "+cfg.API.BaseURL.String(), err, tokenFix)
		if err == nil {
			for _, id := range cfg.Surveys {
				_, lerr := client.ListResponses(ctx, id, survey.ListQuery{Page: 1, PerPage: 1})
				if lerr != nil && surveyUnreadable(lerr) {
					lerr = errors.New(describeUnreadable(lerr))
				}
				check(fmt.Sprintf("survey %d", id), lerr,
					"check the id in surveys (the number in the survey's URL in the web app) and that the token's account may read it")
			}
		}
	}

	wh, err := OpenWarehouse(ctx, cfg, log, reg)
	where := ""
	if err == nil {
		where = wh.String()
		defer wh.Close()
	}
	if len(cfg.ClickHouse.Addr) > 0 {
		check("clickhouse "+fmt.Sprint(cfg.ClickHouse.Addr)+" ("+where+")", err,
			SinkFixFor(cfg, err))
	} else {
		check("sink "+where, err, parquetFix)
	}

	if err == nil {
		for _, c := range wh.CheckWrites(ctx) {
			check("writes to "+c.Table, describeRefusal(c.Err), c.Fix)
		}
		if holders, known := Holders(ctx, cfg, wh); known && len(holders) > 0 {
			info("a daemon writes this warehouse: %s (run refuses a second one: docs/operations.md, \"One daemon per data directory or database\")", strings.Join(holders, "; "))
		}
	}
	if len(cfg.ClickHouse.Addr) == 0 {
		checkLocalState(ctx, cfg, check, info)
	}
	daemonRuns := false
	if addr := Addr(cfg); addr != "" {
		// The running daemon's own writes, when one answers.
		st, derr := RemoteWrites(ctx, addr)
		daemonRuns = derr == nil
		if why := NotReady(ctx, addr); derr != nil && why != "" {
			// It answers but is still starting (its sink is not open).
			daemonRuns = true
			fix := "the daemon retries by itself; fix what it waits for (named here): docs/operations.md, \"Start-up\""
			if err != nil {
				fix = SinkFixFor(cfg, err)
			}
			check(fmt.Sprintf("the daemon on %s starting", addr), errors.New(why), fix)
		}
		if daemonRuns && st.Failing {
			check(fmt.Sprintf("the daemon on %s writing its batches", addr), fmt.Errorf("%s (failing for %s, %d attempts)", RefusalText(cfg, st), RoundDuration(time.Since(st.Since)), st.Attempts),
				"fix the table or grants named here (the lines above say more); the daemon retries by itself, slowly, and loses nothing: docs/operations.md, \"The warehouse refuses writes\"")
		}
	}
	if cfg.HA.Enabled() {
		el, herr := ha.Probe(ctx, cfg.HA.Servers, cfg.HARoot(), HAAuth(cfg), 5*time.Second)
		fix := "check ha.servers: the client port (usually 2181) of the ZooKeeper or ClickHouse Keeper ensemble, reachable from this machine"
		if ha.NoAuth(herr) {
			fix = "give this daemon the ha.username and ha.password (SURVEYSYNC_HA__PASSWORD) of the others: docs/operations.md, \"ZooKeeper authentication\""
		}
		check(fmt.Sprintf("ha servers %s (election under %s)", strings.Join(cfg.HA.Servers, ","), cfg.HARoot()), herr, fix)
		if herr == nil {
			switch len(el.Candidates) {
			case 0:
				info("ha: no instance campaigns yet")
			default:
				info("ha: %d instance(s) campaigning, %s leads", len(el.Candidates), el.Candidates[0])
			}
		}
	}
	if cfg.Files.Enabled {
		check("object store "+cfg.Files.URL.String(), checkBlob(ctx, cfg), "check files.url and its credentials; the daemon writes under surveys/")
	}
	if daemonRuns {
		// Its listeners hold the addresses: that is no failure.
		info("listen addresses not checked: a surveysync daemon answers on metrics.listen %s", Addr(cfg))
	}
	for _, l := range listeners(cfg) {
		if daemonRuns {
			break
		}
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			ln.Close()
		}
		check(l.what+" "+l.addr, err, "pick a free address for "+l.key+" or stop what holds the port")
	}
	for i, f := range cfg.Feeds {
		name := fmt.Sprintf("feed %s (feeds[%d], %s)", f.Name, i, f.Type)
		switch f.Type {
		case config.FeedCSVDir:
			check(name+" folder "+f.CSVDir.Dir, feed.CheckDir(f.CSVDir.Dir),
				fmt.Sprintf("create the folder (mkdir -p %s) or set feeds[%d].csv_dir.dir", f.CSVDir.Dir, i))
		case config.FeedClickHouseQuery:
			var qerr error
			if err == nil && wh.QueryConn() != nil {
				qerr = checkQuery(ctx, wh.QueryConn(), f.ClickHouseQuery.Query)
			} else {
				qerr = errors.New("needs a reachable ClickHouse (clickhouse.addr)")
			}
			check(name+" query", qerr, fmt.Sprintf("fix feeds[%d].clickhouse_query.query: it must run on clickhouse.addr as clickhouse.username", i))
		}
	}
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

// checkLocalState reports the Parquet folder's local files that are
// damaged: a failure with the fix for those run refuses on, a fact for
// those it moves aside (docs/operations.md, "Damaged local state").
func checkLocalState(ctx context.Context, cfg *config.Config, check func(string, error, string), info func(string, ...any)) {
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		return
	}
	held, _ := dirlock.Held(dir)
	bad, busy := 0, 0
	for _, f := range parquet.CheckLocalState(ctx, dir, held) {
		switch {
		case f.InUse:
			busy++
		case f.Err == nil:
		case f.Refused:
			bad++
			check("local file "+f.Path, f.Err, "the error says what the file records and the command that fixes it: docs/operations.md, \"Damaged local state\"")
		default:
			info("local file %s is damaged (%v): run moves it aside and goes on; lost: %s", f.Path, f.Err, f.Lost)
		}
	}
	if busy > 0 {
		info("%d bbolt file(s) under %s not checked: a daemon holds the folder (it checked them when it started)", busy, dir)
	}
	if bad == 0 {
		check("local state under "+dir, nil, "")
	}
}
