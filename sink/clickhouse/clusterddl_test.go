package clickhouse

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// What a migration the cluster did not finish says, and which server
// errors count as such (and so are waited out at start) rather than as a
// refusal of the statement.
func TestMigrationClusterDDLError(t *testing.T) {
	code48 := &ch.Exception{Code: 48, Message: "There was an error on [127.0.0.1:9102]: Code: 48, e.displayText() = DB::Exception: Cannot enqueue replicated DDL query for a replicated shard"}
	timeout := &ch.Exception{Code: codeTimeoutExceeded, Message: "Watching task /clickhouse/task_queue/ddl/query-0000000079 is executing longer than distributed_ddl_task_timeout (=5) seconds"}
	readOnly := &ch.Exception{Code: 242, Message: "There was an error on [127.0.0.1:9104]: Code: 242, Table is in readonly mode"}
	syntax := &ch.Exception{Code: codeSyntaxError, Message: "Syntax error"}
	notImplemented := &ch.Exception{Code: 48, Message: "Some other thing is not implemented"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{code48, true}, {timeout, true}, {readOnly, true}, {fmt.Errorf("wrapped: %w", timeout), true},
		{syntax, false}, {notImplemented, false}, {errors.New("plain"), false},
	} {
		if got := clusterIncomplete(c.err); got != c.want {
			t.Errorf("clusterIncomplete(%v) = %v, want %v", c.err, got, c.want)
		}
	}

	e := &ClusterDDLError{Cluster: "c", Migration: "0065_privacy.sql", Statement: 2, Query: "ALTER TABLE db.t_local ON CLUSTER c ADD COLUMN x String",
		Nodes: []string{"127.0.0.1:9104"}, Err: code48}
	err := fmt.Errorf("open: %w", e)
	for _, want := range []string{"cluster c", "migration 0065_privacy.sql statement 2", "ALTER TABLE db.t_local", "node 127.0.0.1:9104", "Cannot enqueue"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !Unreachable(err) {
		t.Error("a cluster that did not finish a migration is not waited out (Unreachable false)")
	}
	if !errors.Is(err, code48) {
		t.Error("the server's error is not wrapped")
	}
	if fix := e.Fix(); !strings.Contains(fix, "start ClickHouse on 127.0.0.1:9104") || !strings.Contains(fix, "migration 0065_privacy.sql statement 2 stays queued") ||
		strings.Contains(fix, "clickhouse.addr") {
		t.Errorf("fix: %s", fix)
	}
	pending := &ClusterDDLError{Cluster: "c", Migration: "0070_wide_columns.sql", Query: "CREATE TABLE …", Nodes: []string{"h:1", "h:2"}, Pending: true, Err: errors.New("unfinished")}
	if s := pending.Summary(); !strings.Contains(s, "migration 0070_wide_columns.sql waits: node h:1, node h:2 has not run") {
		t.Errorf("pending summary: %s", s)
	}
	unknown := &ClusterDDLError{Cluster: "c", Migration: "bootstrap", Statement: 1, Query: "CREATE DATABASE", Err: timeout}
	if s := unknown.Summary(); !strings.Contains(s, "a node has not run it") || !strings.Contains(unknown.Fix(), "the node that is down") {
		t.Errorf("without the nodes: %s / %s", s, unknown.Fix())
	}
	if Unreachable(&ch.Exception{Code: 48, Message: "Cannot enqueue replicated DDL query"}) {
		t.Error("a bare code 48 outside the migrations counts as unreachable")
	}
	if l := firstLine("CREATE VIEW x AS\nSELECT 1"); l != "CREATE VIEW x AS" {
		t.Errorf("firstLine: %q", l)
	}
	if l := firstLine(strings.Repeat("a", 300)); len(l) != 120 {
		t.Errorf("firstLine of a long line: %d bytes", len(l))
	}
}
