package clickhouse

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/wide"
)

// hostileNames are column names built to break out of a quoted identifier:
// a backslash before the closing backtick, a backtick, quotes, a newline,
// a comment, a second statement.
var hostileNames = []string{
	`a\`,
	"a\\`, 1 AS `x",
	"q`) ENGINE = Memory; DROP DATABASE system; --",
	`it's "quoted"`,
	"two\nlines\r\t\x00\x7f",
	"back\\\\slashes\\n",
	"-- comment",
	"/* c */ x",
}

// Every hostile name quoted by quoteIdent is one identifier to the real
// server: a SELECT alias and a table's column come back named exactly so.
func TestQuoteIdentHostileNames(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	for _, name := range hostileNames {
		rows, err := s.Conn().Query(ctx, "SELECT 1 AS "+quoteIdent(name)+", 2 AS after")
		if err != nil {
			t.Fatalf("SELECT AS %s: %v", quoteIdent(name), err)
		}
		cols := rows.Columns()
		rows.Close()
		if len(cols) != 2 || cols[0] != name || cols[1] != "after" {
			t.Errorf("SELECT 1 AS %s, 2 AS after: columns %q, want [%q after]", quoteIdent(name), cols, name)
		}
	}
	table := s.table("hostile_columns")
	var defs []string
	for _, name := range hostileNames {
		defs = append(defs, quoteIdent(name)+" String")
	}
	if err := s.Conn().Exec(ctx, fmt.Sprintf("CREATE TABLE %s (%s) ENGINE = Memory", table, strings.Join(defs, ", "))); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Conn().Query(ctx, "SELECT * FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	got := rows.Columns()
	rows.Close()
	if strings.Join(got, "|") != strings.Join(hostileNames, "|") {
		t.Errorf("columns of the table: %q, want %q", got, hostileNames)
	}
}

// A wide view whose stored column name is hostile: with names quoted
// completely the view still builds and shows the name as it is; a name
// read back from wide_columns (as copy-from copies it from another server)
// that surveysync would not give is refused, with an error naming the
// survey, the column and the fix, and no SQL runs with it.
func TestWideColumnsHostileName(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	const survey = 8801
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: survey, Version: 1, Answers: 2}})
	cols, err := s.WideColumns(ctx, survey)
	if err != nil || len(cols) != 2 {
		t.Fatalf("wide columns: %v, %v", cols, err)
	}

	// quoteIdent makes the view build whatever the names.
	for _, name := range hostileNames {
		c := append([]WideColumn(nil), cols...)
		c[0].Name = name
		view := s.table("hostile_view")
		if err := s.Conn().Exec(ctx, "DROP TABLE IF EXISTS "+view); err != nil {
			t.Fatal(err)
		}
		if err := s.Conn().Exec(ctx, "CREATE VIEW "+view+" AS\n"+wide.ViewSQL(s.Database(), survey, c, s.version.Version.Major >= 20)); err != nil {
			t.Fatalf("view with column %q: %v", name, err)
		}
		rows, err := s.Conn().Query(ctx, "SELECT * FROM "+view)
		if err != nil {
			t.Fatalf("view with column %q: %v", name, err)
		}
		got := rows.Columns()
		rows.Close()
		if !slices.Contains(got, name) || !slices.Contains(got, cols[1].Name) {
			t.Errorf("view with column %q: columns %q", name, got)
		}
	}

	// A hostile name stored in wide_columns (a newer version of the row of
	// the first column, as a copy from another server would bring it).
	hostile := "x`, 1 AS `y\\"
	bad := cols[0]
	bad.Name = hostile
	if err := s.writeWideColumns(ctx, []WideColumn{bad}); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(ctx, testOptions(s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	_, err = fresh.WideColumns(ctx, survey)
	checkHostileErr(t, "WideColumns", err, survey, bad.QuestionID, hostile)
	_, refreshErr := fresh.RefreshWideViews(ctx, survey)
	checkHostileErr(t, "RefreshWideViews", refreshErr, survey, bad.QuestionID, hostile)
	// A write that would replace the view logs the same and leaves the
	// view as it was: no column named after the hostile name, ever.
	writeBatch(t, fresh, []testResponse{{ID: guid(2), SurveyID: survey, Version: 2, Answers: 3}})
	rows, err := s.Conn().Query(ctx, "SELECT * FROM "+s.table(WideViewName(survey)))
	if err != nil {
		t.Fatal(err)
	}
	got := rows.Columns()
	rows.Close()
	if slices.Contains(got, hostile) || slices.Contains(got, "y\\") || !slices.Contains(got, cols[0].Name) {
		t.Errorf("the view's columns after the refused refresh: %q", got)
	}

	// The fix the error gives works: delete the row, refresh.
	msg := refreshErr.Error()
	fix := msg[strings.Index(msg, "ALTER TABLE"):strings.Index(msg, ", then surveysync")]
	if err := s.Conn().Exec(ctx, fix); err != nil {
		t.Fatalf("the fix %q: %v", fix, err)
	}
	waitMutations(t, s)
	views, err := fresh.RefreshWideViews(ctx, survey)
	if err != nil {
		t.Fatalf("refresh after the fix: %v", err)
	}
	if len(views) != 1 || len(views[0].Columns) != 3 {
		t.Fatalf("refresh after the fix: %+v", views)
	}
	for _, c := range views[0].Columns {
		if c.Name == hostile {
			t.Errorf("the hostile name is back: %+v", c)
		}
	}
}

func checkHostileErr(t *testing.T, what string, err error, survey, question int64, name string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error for the hostile column name %q", what, name)
	}
	msg := err.Error()
	for _, want := range []string{fmt.Sprintf("survey %d", survey), fmt.Sprintf("question %d", question), fmt.Sprintf("%q", name), "ALTER TABLE", "views --refresh"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: error %q does not name %s", what, msg, want)
		}
	}
}

// waitMutations waits until the database's mutations are done on every
// node (in cluster mode, each replica applies them on its own).
func waitMutations(t *testing.T, s *Sink) {
	t.Helper()
	ctx := ctxT(t)
	eachNode(t, func(addr string, c driver.Conn) {
		for range 400 {
			var n uint64
			if err := c.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND is_done = 0", s.Database()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			time.Sleep(50 * time.Millisecond) // the server's mutation: no event to wait on
		}
		t.Fatalf("%s: mutations not done", addr)
	})
}
