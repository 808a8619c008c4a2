package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/clickhouse"
)

// The start-up's line, /readyz text, fix and back-off for each cause it
// waits out.
func TestWaitStartupNamesTheCause(t *testing.T) {
	cfg := &config.Config{ClickHouse: config.ClickHouse{Addr: []string{"127.0.0.1:9101"}}}
	cde := &clickhouse.ClusterDDLError{Cluster: "c", Migration: "0065_privacy.sql", Statement: 1, Query: "ALTER TABLE db.t_local ON CLUSTER c",
		Nodes: []string{"127.0.0.1:9104"}, Err: errors.New("Cannot enqueue replicated DDL query for a replicated shard")}
	busy := &clickhouse.MigrationsBusyError{Database: "db", Host: "other", PID: 7, Since: 3 * time.Second}
	for _, c := range []struct {
		err              error
		line, ready, fix string
		maxWait          time.Duration
	}{
		{cde, "start-up: the cluster has not run a migration on every node", "starting: cluster c: migration 0065_privacy.sql statement 1", "start ClickHouse on 127.0.0.1:9104", 10 * time.Second},
		{busy, "start-up: another surveysync applies the migrations", "being applied by another surveysync (host other, pid 7", "its claim in db.migration_lock expires", 5 * time.Second},
		{errors.New("dial tcp: connection refused"), "start-up: the warehouse is unreachable", "starting: the warehouse is unreachable", "check clickhouse.addr", startRetryMax},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		st := &startup{}
		wait := waitStartup(log, st, cfg, 9, c.err)
		if wait > c.maxWait || wait < c.maxWait/2 {
			t.Errorf("%v: wait %v, want within [%v, %v]", c.err, wait, c.maxWait/2, c.maxWait)
		}
		if strings.Count(buf.String(), "\n") != 1 || !strings.Contains(buf.String(), c.line) {
			t.Errorf("%v: log %q, want one line with %q", c.err, buf.String(), c.line)
		}
		errs := st.errs()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.ready) || !strings.Contains(errs[0].Error(), "attempt 9") {
			t.Errorf("%v: /readyz says %v, want %q", c.err, errs, c.ready)
		}
		if fix := SinkFixFor(cfg, c.err); !strings.Contains(fix, c.fix) {
			t.Errorf("%v: fix %q, want %q", c.err, fix, c.fix)
		}
	}
}
