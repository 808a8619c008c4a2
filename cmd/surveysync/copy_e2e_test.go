package main

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/surveysync/surveysync/internal/testkit/chserver"
	"github.com/surveysync/surveysync/sim"
)

// TestCopyFromPasswordAndHostileColumn, through the binary: a daemon
// backfills a source server whose user has a password (a private server
// that logs every query); `surveysync copy-from` with the password in
// SURVEYSYNC_COPY_FROM_PASSWORD copies it exactly into the test server,
// and no query the source logged, nor any output, has the password.
// Then a hostile column name planted in the source's wide_columns: the
// copy stops with an error naming the survey, the column and the fix,
// never the password, and `surveysync views` on the copy refuses it alike.
func TestCopyFromPasswordAndHostileColumn(t *testing.T) {
	const pw = "e2e-copy-pw-'s3cret'"
	srv := chserver.Start(t, pw)
	conn, err := ch.Open(&ch.Options{Addr: []string{srv.Addr}, Auth: ch.Auth{Password: pw}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	src := &testWarehouse{conn: conn, db: "test_e2e_src_" + randHex(6), addr: srv.Addr}
	e := newEmulator(t, sim.Options{Surveys: specs(1, 40, 5)})
	t.Setenv("SURVEYSYNC_CLICKHOUSE__PASSWORD", pw) // the source's daemon
	d := startDaemon(t, writeConfig(t, e, src, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n"), "--exit-when-synced")
	d.wait(t, 2*time.Minute)
	truth := truthFingerprints(e)
	if msg := diff(truth, warehouseFingerprints(t, src)); msg != "" {
		t.Fatalf("the source: %s", msg)
	}

	copyFrom := func(target *testWarehouse) (string, int) {
		t.Helper()
		cmd := exec.Command(binPath, "copy-from", srv.Addr, "--from-database", src.db, "--config", writeConfig(t, e, target, ""))
		cmd.Env = append(cliEnv(), "SURVEYSYNC_COPY_FROM_PASSWORD="+pw)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), pw) {
			t.Errorf("the password is in copy-from's output:\n%s", out)
		}
		return string(out), code
	}
	dst := clickhouseOrSkip(t)
	if out, code := copyFrom(dst); code != 0 || !strings.Contains(out, "copied database "+src.db) {
		t.Fatalf("copy-from: exit %d\n%s", code, out)
	}
	if msg := diff(truth, warehouseFingerprints(t, dst)); msg != "" {
		t.Fatalf("the copy: %s", msg)
	}

	// A hostile name for the first column (a newer version of its row).
	ctx := context.Background()
	const hostile = "q`, 1 AS `x\\"
	var survey int64
	var question int64
	if err := conn.QueryRow(ctx, "SELECT survey_id, question_id FROM "+src.db+".wide_columns FINAL ORDER BY survey_id, question_id LIMIT 1").Scan(&survey, &question); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "INSERT INTO "+src.db+".wide_columns SELECT survey_id, question_id, row_id, part, ?, column_kind, column_type, question_type, variable, "+
		"question_title, row_label, page_index, question_index, first_seen, _version + 1000000 FROM "+src.db+".wide_columns FINAL WHERE survey_id = ? AND question_id = ?",
		hostile, survey, question); err != nil {
		t.Fatal(err)
	}
	dst2 := clickhouseOrSkip(t)
	out, code := copyFrom(dst2)
	if code == 0 {
		t.Fatalf("copy-from with a hostile column name succeeded:\n%s", out)
	}
	for _, want := range []string{"survey " + strconv.FormatInt(survey, 10), "question " + strconv.FormatInt(question, 10), "not one surveysync gives", "ALTER TABLE", "views --refresh"} {
		if !strings.Contains(out, want) {
			t.Errorf("copy-from's error does not say %q:\n%s", want, out)
		}
	}
	vcmd := exec.Command(binPath, "views", "--config", writeConfig(t, e, dst2, ""))
	vcmd.Env = cliEnv()
	vout, err := vcmd.CombinedOutput()
	if err == nil || !strings.Contains(string(vout), "survey "+strconv.FormatInt(survey, 10)) {
		t.Errorf("views on the copy with the hostile name: %v\n%s", err, vout)
	}

	// The source, which logs every query, ran none with the password in
	// it (the target's side: sink/clickhouse's
	// TestCopyFromPasswordNeverInQueriesNorErrors, both on one logging server).
	if err := conn.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		t.Fatal(err)
	}
	var n, reads uint64
	if err := conn.QueryRow(ctx, "SELECT countIf(position(query, ?) > 0), countIf(position(query, ?) > 0) FROM system.query_log",
		pw, "SELECT * FROM "+src.db).Scan(&n, &reads); err != nil {
		t.Fatal(err)
	}
	if n != 0 || reads == 0 {
		t.Errorf("source's system.query_log: %d queries with the password (want 0), %d copy reads (want some)", n, reads)
	}
}
