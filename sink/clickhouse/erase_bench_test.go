package clickhouse

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// TestEraseMillion measures erasure on a table of 1M responses (docs/
// benchmarks.md, "Erasure"): the time of EraseRows for one response and
// for a batch of 1000, the server's CPU time and the bytes its mutations
// rewrote, and how long the replaced parts stay on disk. It runs only with
// SURVEYSYNC_BENCH_ERASE=1 (minutes, and gigabytes of disk);
// SURVEYSYNC_BENCH_ERASE_RESPONSES changes the size,
// SURVEYSYNC_BENCH_ERASE_LINGER=0 skips the wait for old parts.
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 SURVEYSYNC_BENCH_ERASE=1 \
//	  go test -count=1 -run TestEraseMillion -v -timeout 60m ./sink/clickhouse/
func TestEraseMillion(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_ERASE") != "1" {
		t.Skip("SURVEYSYNC_BENCH_ERASE=1 runs it")
	}
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SURVEYSYNC_BENCH_ERASE_RESPONSES")); err == nil && v > 0 {
		n = v
	}
	const answersPer = 10
	s, _ := openTest(t, nil)
	ctx := t.Context()
	// Responses spread over 12 months (12 partitions), ids derived from
	// the number so that the test can name them.
	idExpr := "toUUID(concat('00000000-0000-4000-8000-', substring(hex(toUInt64(number) + 72057594037927936), 5, 12)))"
	exec := func(q string) {
		t.Helper()
		if err := s.conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	start := time.Now()
	exec(fmt.Sprintf(`INSERT INTO %s (response_id, survey_id, survey_name, ip_address, date_created, response_status, synced_at, _version)
SELECT %s, 1, 'bench', '192.0.2.1', toDateTime('2026-01-01 00:00:00', 'UTC') + (number %% 360) * 86400, 'completed', now(), 1
FROM numbers(%d)`, s.table("responses"), idExpr, n))
	exec(fmt.Sprintf(`INSERT INTO %s (response_id, survey_id, question_id, question_index, question_type, text, value, response_status, date_completed, _version)
SELECT %s, 1, q, toUInt16(q), 'essay', concat('answer text ', toString(number)), toInt64(number %% 7), 'completed',
       toDateTime('2026-01-01 00:00:00', 'UTC') + (number %% 360) * 86400, 1
FROM numbers(%d) ARRAY JOIN range(%d) AS q`, s.table("answers"), idExpr, n, answersPer))
	exec("OPTIMIZE TABLE " + s.table("responses") + " FINAL")
	exec("OPTIMIZE TABLE " + s.table("answers") + " FINAL")
	t.Logf("loaded %d responses and %d answers in %s (merged)", n, n*answersPer, time.Since(start).Round(time.Second))
	t.Logf("server %s; parts: %s", s.ServerVersion(), s.partsSummary(t))

	key := func(i int) warehouse.ResponseKey {
		return warehouse.ResponseKey{SurveyID: 1, ResponseID: survey.GUID(fmt.Sprintf("00000000-0000-4000-8000-%012x", i))}
	}
	measure := func(what string, keys []warehouse.ResponseKey) {
		t.Helper()
		cpu0 := serverCPU(t)
		t0 := time.Now()
		found, err := s.EraseRows(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		wall := time.Since(t0)
		cpu := serverCPU(t) - cpu0
		t.Logf("%s: %s wall, server CPU %s, found %v; parts now: %s", what, wall.Round(time.Millisecond), cpu.Round(time.Millisecond), found, s.partsSummary(t))
	}
	measure("1 response", []warehouse.ResponseKey{key(n / 2)})
	var batch []warehouse.ResponseKey
	for i := 0; i < 1000; i++ {
		batch = append(batch, key(i*(n/1000)+7))
	}
	measure("1000 responses in one call", batch)

	if os.Getenv("SURVEYSYNC_BENCH_ERASE_LINGER") == "0" {
		return
	}
	t0 := time.Now()
	for {
		var inactive uint64
		if err := s.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM system.parts WHERE database = '%s' AND NOT active", s.Database())).Scan(&inactive); err != nil {
			t.Fatal(err)
		}
		if inactive == 0 {
			t.Logf("old parts removed %s after the last mutation", time.Since(t0).Round(time.Second))
			return
		}
		if time.Since(t0) > 20*time.Minute {
			t.Logf("%d old parts still on disk after %s", inactive, time.Since(t0).Round(time.Second))
			return
		}
		time.Sleep(10 * time.Second)
	}
}

// partsSummary is "active N (X MiB), inactive M (Y MiB)" for the database.
func (s *Sink) partsSummary(t *testing.T) string {
	t.Helper()
	rows, err := s.conn.Query(t.Context(), fmt.Sprintf("SELECT active, count(), sum(bytes_on_disk) FROM system.parts WHERE database = '%s' GROUP BY active ORDER BY active DESC", s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var active uint8
		var cnt, bytes uint64
		if err := rows.Scan(&active, &cnt, &bytes); err != nil {
			t.Fatal(err)
		}
		name := "inactive"
		if active == 1 {
			name = "active"
		}
		out = append(out, fmt.Sprintf("%s %d (%.1f MiB)", name, cnt, float64(bytes)/(1<<20)))
	}
	return strings.Join(out, ", ")
}

// serverCPU is the user+system CPU time of the local clickhouse-server
// process whose configuration file has the test server's tcp_port (0 when
// none is found: a remote server).
func serverCPU(t *testing.T) time.Duration {
	t.Helper()
	_, port, _ := strings.Cut(testAddrs()[0], ":")
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		cmdline, err := os.ReadFile(m)
		if err != nil || !strings.Contains(string(cmdline), "clickhouse-server") {
			continue
		}
		_, cfgFile, ok := strings.Cut(string(cmdline), "--config-file=")
		if !ok {
			continue
		}
		cfgFile, _, _ = strings.Cut(cfgFile, "\x00")
		cfg, err := os.ReadFile(cfgFile)
		if err != nil || !strings.Contains(string(cfg), "<tcp_port>"+port+"</tcp_port>") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(m), "stat"))
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: utime and stime are the
		// 12th and 13th fields (clock ticks, 100 per second).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		sy, _ := strconv.ParseUint(f[12], 10, 64)
		return time.Duration(u+sy) * 10 * time.Millisecond
	}
	return 0
}
