package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// TestQueryAndExportBothBackends: one emulator survey synced into
// ClickHouse and into Parquet files; through the binary, query and export
// go through the warehouse's parts alone (no question of which backend),
// and both backends give the same counts and the same rows: query's total
// is the service's, each export (wide as CSV and Parquet, the long tables)
// has as many rows from one as from the other. What each backend prints
// around the counts is its own: the Parquet files' deletions and a sample,
// ClickHouse's database and the next command to try.
func TestQueryAndExportBothBackends(t *testing.T) {
	w := clickhouseOrSkip(t)
	const sid = 4574 // every question kind
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 40, Seed: 3}}})
	want := 0
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus != survey.StatusDeleted {
			want++
		}
	}
	configs := map[string]string{"clickhouse": writeConfig(t, e, w, ""), "parquet": writeConfig(t, e, nil, "")}
	rows := map[string]map[string]int{} // backend → export → rows
	for _, backend := range []string{"clickhouse", "parquet"} {
		cfg := configs[backend]
		startDaemon(t, cfg, "--exit-when-synced").wait(t, 3*time.Minute)

		out, code := runCLIBin(t, "query", "--config", cfg, "--sample", "3")
		if code != exitOK {
			t.Fatalf("%s: query: exit %d\n%s", backend, code, out)
		}
		t.Logf("%s: query:\n%s", backend, out)
		if got := currentCount(t, out); got != want {
			t.Errorf("%s: query counts %d current responses, the service has %d", backend, got, want)
		}
		own := map[string][]string{
			"clickhouse": {"ClickHouse ", "database " + w.db, "more: clickhouse-client --query 'SELECT * FROM " + w.db + ".responses_current LIMIT 5'"},
			"parquet":    {"Parquet output under ", "DELETED", "sample: the 3 most recently created current responses"},
		}[backend]
		for _, s := range own {
			if !strings.Contains(out, s) {
				t.Errorf("%s: query lacks %q", backend, s)
			}
		}

		rows[backend] = map[string]int{}
		dir := t.TempDir()
		for _, x := range []struct{ table, format string }{{"wide", "csv"}, {"wide", "parquet"}, {"responses", "csv"}, {"answers", "csv"}} {
			name := x.table + "." + x.format
			path := filepath.Join(dir, name)
			out, code := runCLIBin(t, "export", "--config", cfg, "--survey", fmt.Sprint(sid), "--table", x.table, "--format", x.format, "-o", path)
			if code != exitOK {
				t.Fatalf("%s: export %s: exit %d\n%s", backend, name, code, out)
			}
			var n int
			var what string
			if _, err := fmt.Sscanf(out[strings.Index(out, "exported "):], "exported %d %s", &n, &what); err != nil {
				t.Fatalf("%s: export %s printed %q", backend, name, out)
			}
			rows[backend][name] = n
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if x.format == "parquet" {
				if !strings.HasPrefix(string(data), "PAR1") {
					t.Errorf("%s: export %s is not a Parquet file", backend, name)
				}
				continue
			}
			recs, err := csv.NewReader(strings.NewReader(string(data))).ReadAll()
			if err != nil || len(recs) != n+1 {
				t.Errorf("%s: export %s: %d CSV records (%v), says %d rows", backend, name, len(recs), err, n)
			}
		}
		if rows[backend]["wide.csv"] != want || rows[backend]["responses.csv"] != want || rows[backend]["wide.parquet"] != want {
			t.Errorf("%s: exports %v, want %d responses each", backend, rows[backend], want)
		}
	}
	if rows["clickhouse"]["answers.csv"] == 0 || rows["clickhouse"]["answers.csv"] != rows["parquet"]["answers.csv"] {
		t.Errorf("answers exported: ClickHouse %d rows, Parquet %d", rows["clickhouse"]["answers.csv"], rows["parquet"]["answers.csv"])
	}
}
