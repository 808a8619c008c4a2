package clickhouse

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/internal/testkit/chserver"
)

// lockedBuf is a log sink safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CopyFrom with a source whose user has a password, on a private server
// that logs every query: the copy is exact, no query the server ran has
// the password in its text, and every error path of the copy — a bad
// address, a wrong password, a database without surveysync's tables, a
// missing migration, a missing table, an insert the target refuses,
// current rows that differ, a hostile column name in wide_columns — fires
// with an error that names what failed and never the password; nor does
// the log. (Also a migration the target does not know and a bad database
// name; every error leaves CopyFrom through one redaction besides.)
func TestCopyFromPasswordNeverInQueriesNorErrors(t *testing.T) {
	const pw = "Copy-pw-'quoted'\\x-s3cret"
	srv := chserver.Start(t, pw)
	ctx := ctxT(t)
	var logs lockedBuf
	open := func(db string) *Sink {
		t.Helper()
		s, err := Open(ctx, Options{Addr: []string{srv.Addr}, Password: pw, Database: db, Registerer: prometheus.NewRegistry(),
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	src := open(randomDB())
	writeBatch(t, src, []testResponse{
		{ID: guid(1), SurveyID: 7, Version: 1, Answers: 3, Params: [][2]string{{"src", "mail"}}},
		{ID: guid(2), SurveyID: 7, Version: 2, Answers: 2},
		{ID: guid(3), SurveyID: 8, Version: 3, Deleted: true},
	})
	dst := open(randomDB())
	good := CopySource{Addr: srv.Addr, Database: src.Database(), Password: pw}
	if _, err := dst.CopyFrom(ctx, good); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(readResponses(t, src), readResponses(t, dst)); diff != "" {
		t.Errorf("responses_current differs (-source +copy):\n%s", diff)
	}
	if diff := cmp.Diff(readAnswers(t, src), readAnswers(t, dst)); diff != "" {
		t.Errorf("answers_current differs (-source +copy):\n%s", diff)
	}

	noPassword := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), strings.Trim(quoteString(pw), "'")) {
			t.Errorf("%s: the password is in the error: %v", what, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %q", what, err, want)
		}
		t.Logf("%s: %v", what, err)
	}
	exec := func(q string) {
		t.Helper()
		if err := src.Conn().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	copyTo := func(s *Sink, from CopySource) error {
		_, err := s.CopyFrom(ctx, from)
		return err
	}

	bad := good
	bad.Addr = "no-port"
	noPassword("bad address", copyTo(dst, bad), "host:port")
	bad = good
	bad.Password = pw + "-wrong"
	noPassword("wrong password", copyTo(dst, bad), "SURVEYSYNC_COPY_FROM_PASSWORD")
	bad = good
	bad.Database = "system"
	noPassword("no surveysync tables", copyTo(dst, bad), "system.schema_migrations")

	// A database with the migrations but the last one, then one with all
	// of them and no tables.
	partial, empty := randomDB(), randomDB()
	for _, db := range []string{partial, empty} {
		exec("CREATE DATABASE " + db)
		exec(fmt.Sprintf("CREATE TABLE %s.schema_migrations AS %s", db, src.table("schema_migrations")))
		t.Cleanup(func() { _ = src.Conn().Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })
	}
	exec(fmt.Sprintf("INSERT INTO %s.schema_migrations SELECT * FROM %s WHERE version < (SELECT max(version) FROM %s)",
		partial, src.table("schema_migrations"), src.table("schema_migrations")))
	exec(fmt.Sprintf("INSERT INTO %s.schema_migrations SELECT * FROM %s", empty, src.table("schema_migrations")))
	bad.Database = partial
	noPassword("a missing migration", copyTo(dst, bad), "lacks migration")
	exec(fmt.Sprintf("INSERT INTO %s.schema_migrations SELECT * FROM %s", partial, src.table("schema_migrations")))
	exec(fmt.Sprintf("INSERT INTO %s.schema_migrations SELECT toUInt32(99999), name, applied_at FROM %s LIMIT 1", partial, src.table("schema_migrations")))
	noPassword("a migration the target does not know", copyTo(dst, bad), "migration 99999")
	bad.Database = "no-such;db"
	noPassword("a bad database name", copyTo(dst, bad), "must match")
	bad.Database = empty
	noPassword("a missing table", copyTo(dst, bad), "read "+empty+".answers")

	// The target holds a response the source lacks: the current rows differ.
	writeBatch(t, dst, []testResponse{{ID: guid(9), SurveyID: 7, Version: 9, Answers: 1}})
	noPassword("current rows differ", copyTo(dst, good), "current rows")

	// A hostile column name in the source's wide_columns.
	cols, err := src.WideColumns(ctx, 7)
	if err != nil || len(cols) == 0 {
		t.Fatalf("wide columns: %v %v", cols, err)
	}
	cols[0].Name = "x`, 1 AS `y\\"
	if err := src.writeWideColumns(ctx, cols[:1]); err != nil {
		t.Fatal(err)
	}
	dst2 := open(randomDB())
	noPassword("a hostile column name", copyTo(dst2, good), "survey 7")

	// A column the target lacks: the insert is refused.
	exec("ALTER TABLE " + src.table("answers") + " ADD COLUMN extra String")
	noPassword("an insert refused", copyTo(dst2, good), "insert into "+dst2.table("answers"))

	// No query the server ran carried the password; nor did the log.
	exec("SYSTEM FLUSH LOGS")
	var n uint64
	if err := src.Conn().QueryRow(ctx, "SELECT count() FROM system.query_log WHERE position(query, ?) > 0 OR position(query, ?) > 0",
		pw, strings.Trim(quoteString(pw), "'")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	var copies uint64
	if err := src.Conn().QueryRow(ctx, "SELECT count() FROM system.query_log WHERE position(query, ?) > 0", "SELECT * FROM "+src.Database()).Scan(&copies); err != nil {
		t.Fatal(err)
	}
	if n != 0 || copies == 0 {
		t.Errorf("system.query_log: %d queries with the password (want 0), %d copy reads (want some)", n, copies)
	}
	if strings.Contains(logs.String(), pw) {
		t.Error("the password is in the log")
	}
}
