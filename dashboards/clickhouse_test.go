package dashboards

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

func dropDatabase(t testing.TB, addr, db string) {
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Logf("drop %s: %v", db, err)
		return
	}
	defer conn.Close()
	if err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db); err != nil {
		t.Logf("drop %s: %v", db, err)
	}
}

// queryRows runs sql and returns its rows as strings; empty strings, zero
// numbers and NULLs are "" so that a row of nothing can be told apart.
func queryRows(ctx context.Context, conn driver.Conn, sql string) ([][]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cts := rows.ColumnTypes()
	var out [][]string
	for rows.Next() {
		ptrs := make([]any, len(cts))
		for i, ct := range cts {
			ptrs[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := make([]string, len(cts))
		for i, p := range ptrs {
			v := reflect.ValueOf(p).Elem()
			for v.Kind() == reflect.Pointer {
				if v.IsNil() {
					break
				}
				v = v.Elem()
			}
			if v.Kind() == reflect.Pointer || v.IsZero() {
				continue
			}
			row[i] = fmt.Sprint(v.Interface())
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

func nonEmpty(row []string) bool {
	for _, v := range row {
		if v != "" {
			return true
		}
	}
	return false
}

// TestSurveyResultsOnClickHouse syncs the built-in emulator (uploads on)
// into a fresh ClickHouse database with the real daemon, then runs every
// query of the Survey results dashboard — the variable queries first, to
// pick real values, then each panel's, for every question the question
// picker offers — with the macros expanded as the ClickHouse data source
// does. Each must run on the server (18.16 in CI) and return at least one
// row that is not all zeros and empty strings.
func TestSurveyResultsOnClickHouse(t *testing.T) {
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	bin := daemonBinary(t)
	db := "test_dashboards_" + randHex(6)
	t.Cleanup(func() { dropDatabase(t, addr, db) })
	dir := t.TempDir()
	cfg, _ := writeDaemonConfig(t, dir, daemonSetup{surveys: 2, responses: 300, files: true, pollInterval: "30s"})
	// ClickHouse through the environment and a flag, as an operator would.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--exit-when-synced", "--set", "clickhouse.database="+db)
	cmd.Env = append(os.Environ(), "SURVEYSYNC_CLICKHOUSE__ADDR="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("surveysync run --exit-when-synced: %v\n%s", err, tail(string(out), 40))
	}

	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	d, _ := loadDashboard(t, resultsFile)
	rng, err := grafanaRange(d.Time.From, d.Time.To, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"database": db}
	run := func(where, sql string) [][]string {
		t.Helper()
		x, err := expandSQL(sql, vars, rng, time.Hour)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		rows, err := queryRows(ctx, conn, x)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, x)
			return nil
		}
		if len(rows) == 0 || !nonEmpty(rows[0]) {
			t.Errorf("%s: no rows (or only zeros)\n%s", where, x)
			return rows
		}
		if testing.Verbose() {
			t.Logf("%s: %d rows, first %q", where, len(rows), rows[0])
		}
		return rows
	}
	// Variables in dashboard order, each from the first value of its query.
	var questions [][]string
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		rows := run("variable "+v.Name, v.query())
		if len(rows) == 0 {
			t.FailNow()
		}
		if len(rows[0]) != 2 {
			t.Errorf("variable %s: %d columns, want value and label", v.Name, len(rows[0]))
		}
		vars[v.Name], vars[v.Name+":text"] = rows[0][0], rows[0][1]
		if v.Name == "question_id" {
			questions = rows
		}
	}
	queries := resultsQueries(t, d)
	for _, q := range queries {
		if !strings.Contains(q.sql, "${question_id}") {
			run(q.where, q.sql)
			continue
		}
		for _, qu := range questions {
			vars["question_id"], vars["question_id:text"] = qu[0], qu[1]
			run(fmt.Sprintf("%s, question %s %s", q.where, qu[0], qu[1]), q.sql)
		}
	}
	t.Logf("ran %d panel queries (the question ones for %d questions) on database %s", len(queries), len(questions), db)

	t.Run("docs/schema.md", func(t *testing.T) { checkSchemaDoc(t, ctx, conn, db) })
}

// checkSchemaDoc checks that docs/schema.md documents every column of every
// table and view the migrations created: a table or view with its own
// section ("## name") lists each column there as `column`; a table without
// one has a row in "The tables underneath" and its columns are in that row
// or in the section of its name_current view.
func checkSchemaDoc(t *testing.T, ctx context.Context, conn driver.Conn, db string) {
	raw, err := os.ReadFile("../docs/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(raw), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = strings.TrimSpace(h)
		} else if h, ok := strings.CutPrefix(line, "### "); ok {
			cur = strings.TrimSpace(h)
		}
		sections[cur] += line + "\n"
	}
	rowOf := func(table string) string {
		for _, l := range strings.Split(sections["The tables underneath"], "\n") {
			if strings.HasPrefix(l, "| `"+table+"` |") {
				return l
			}
		}
		return ""
	}
	rows, err := queryRows(ctx, conn, "SELECT table, name FROM system.columns WHERE database = '"+db+"' ORDER BY table")
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]bool{}
	for _, r := range rows {
		table, col := r[0], r[1]
		if wideViewRE.MatchString(table) {
			continue // survey_<id>: its columns are the survey's questions (docs/schema.md, "Wide tables")
		}
		tables[table] = true
		where := sections[table]
		if where == "" {
			where = rowOf(table) + sections[table+"_current"]
			if rowOf(table) == "" {
				t.Errorf("table %s: no section and no row in 'The tables underneath'", table)
				continue
			}
		}
		if !strings.Contains(where, "`"+col+"`") && !strings.Contains(where, "`"+col+" ") {
			t.Errorf("column %s.%s is not documented in docs/schema.md", table, col)
		}
	}
	if len(tables) < 10 {
		t.Errorf("only %d tables and views in %s", len(tables), db)
	}
	t.Logf("%d columns of %d tables and views documented", len(rows), len(tables))
}

// wideViewRE matches the wide view of a survey, whose columns differ per survey.
var wideViewRE = regexp.MustCompile(`^survey_[0-9]+$`)
