//go:build chdb

package chdbcheck

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/chdb-io/chdb-go/chdb"

	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

var session *chdb.Session

func TestMain(m *testing.M) {
	// chdb-go has already loaded the library (or panicked) by now.
	dir, err := os.MkdirTemp("", "chdb_surveysync")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	session, err = chdb.NewSession(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chdb session:", err)
		os.Exit(1)
	}
	code := m.Run()
	session.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func query(t *testing.T, sql string) string {
	t.Helper()
	res, err := session.Query(sql, "TSV")
	if err == nil && res != nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("chdb: %v\n%s", err, sql)
	}
	if res == nil {
		return ""
	}
	defer res.Free()
	return strings.TrimSpace(res.String())
}

// queryErr runs sql and returns its error.
func queryErr(sql string) error {
	res, err := session.Query(sql, "TSV")
	if err == nil && res != nil {
		err = res.Error()
		res.Free()
	}
	return err
}

const db = "surveysync_chdb"

func guid(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// insertResponse writes one responses row (deleted: at the epoch, like a
// deletion known only from a 404).
func insertResponse(t *testing.T, n int, version uint64, status string) {
	created, deleted := "2026-08-21 10:30:00", 0
	if status == "deleted" {
		created, deleted = "1970-01-01 00:00:00", 1
	}
	query(t, fmt.Sprintf(`INSERT INTO %s.responses (response_id, survey_id, survey_name, distribution_id, contact_id,
    ip_address, date_created, date_completed, total_time, response_status, url_parameters.name, url_parameters.value,
    is_deleted, synced_at, _version)
VALUES ('%s', 42, 'Průzkum', 14457, NULL, '10.0.0.1', '%s', '2026-08-21 11:30:00', 3600, '%s', ['utm_source'], ['mail'], %d, now(), %d)`,
		db, guid(n), created, status, deleted, version))
}

func insertAnswers(t *testing.T, n int, version uint64, count int) {
	var rows []string
	for q := range count {
		rows = append(rows, fmt.Sprintf(`('%s', 42, 1, 0, %d, %d, 'single_choice', 'Otázka', 'q%d', 0, NULL, '', NULL, '', 5000, 'Ano', NULL, 'v%d', %d, 'completed', '2026-08-21 11:30:00', %d)`,
			guid(n), 1000+q, q, q, version, q, version))
	}
	query(t, fmt.Sprintf(`INSERT INTO %s.answers (response_id, survey_id, page_id, page_index, question_id, question_index,
    question_type, question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label,
    other_id, text, value, response_status, date_completed, _version) VALUES %s`, db, strings.Join(rows, ", ")))
}

// write is one Write of the sink: answers first, then the responses row.
func write(t *testing.T, n int, version uint64, answers int, status string) {
	if answers > 0 {
		insertAnswers(t, n, version, answers)
	}
	insertResponse(t, n, version, status)
}

func TestSchemaAndViewsOnCurrentClickHouse(t *testing.T) {
	t.Logf("ClickHouse %s (chdb)", query(t, "SELECT version()"))
	stmts, err := clickhouse.SchemaDDL(db, "")
	if err != nil {
		t.Fatal(err)
	}
	// Twice: every statement is idempotent, as the sink runs it (an ALTER …
	// ADD COLUMN whose column exists counts as done: 18.16 has no ADD
	// COLUMN IF NOT EXISTS).
	for pass := range 2 {
		for _, stmt := range stmts {
			if pass == 1 && strings.Contains(stmt, " ADD COLUMN ") {
				if err := queryErr(stmt); err != nil && !strings.Contains(err.Error(), "DUPLICATE_COLUMN") {
					t.Fatalf("chdb: %v\n%s", err, stmt)
				}
				continue
			}
			query(t, stmt)
		}
	}
	for _, v := range []string{"responses_current", "answers_current", "surveys_current", "sync_state_current"} {
		if got := query(t, fmt.Sprintf("SELECT count() FROM system.tables WHERE database = '%s' AND name = '%s'", db, v)); got != "1" {
			t.Fatalf("%s missing", v)
		}
	}
	wantCols := "response_id,survey_id,survey_name,distribution_id,contact_id,contact_id_hash,ip_address,date_created,date_completed,total_time,response_status,url_parameters.name,url_parameters.value,synced_at,_version"
	if got := query(t, fmt.Sprintf("SELECT arrayStringConcat(groupArray(name), ',') FROM (SELECT name FROM system.columns WHERE database = '%s' AND table = 'responses_current' ORDER BY position)", db)); got != wantCols {
		t.Errorf("responses_current columns:\n got %s\nwant %s", got, wantCols)
	}

	// Scenarios of the 18.16 integration tests, on unmerged parts: the
	// views, not merges, must do the work.
	for _, table := range []string{"responses", "answers", "surveys", "sync_state"} {
		query(t, fmt.Sprintf("SYSTEM STOP MERGES %s.%s", db, table))
	}
	for range 3 { // one batch written three times
		write(t, 1, 100, 5, "completed")
		write(t, 2, 100, 3, "completed")
		write(t, 3, 100, 4, "partial")
	}
	write(t, 3, 200, 2, "completed") // newer version, fewer answers
	write(t, 1, 150, 0, "deleted")   // deleted
	insertAnswers(t, 2, 300, 1)      // crash between the inserts: answers of v300 without their responses row
	write(t, 3, 120, 7, "partial")   // a late older version changes nothing

	check := func(name, sql, want string) {
		t.Helper()
		if got := query(t, sql); got != want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
	check("unmerged responses parts", fmt.Sprintf("SELECT count() > 3 FROM system.parts WHERE database = '%s' AND table = 'responses' AND active", db), "1")
	check("responses_current", fmt.Sprintf("SELECT toString(response_id), response_status, _version FROM %s.responses_current ORDER BY response_id", db),
		guid(2)+"\tcompleted\t100\n"+guid(3)+"\tcompleted\t200")
	check("answers_current per response", fmt.Sprintf("SELECT toString(response_id), _version, count() FROM %s.answers_current GROUP BY response_id, _version ORDER BY response_id", db),
		guid(2)+"\t100\t3\n"+guid(3)+"\t200\t2")
	check("filter on responses_current does not resurrect a deleted response",
		fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE response_status = 'completed' AND response_id = '%s'", db, guid(1)), "0")
	check("filter on responses_current does not bring back an older version",
		fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE response_status = 'partial'", db), "0")
	check("filter on answers_current", fmt.Sprintf("SELECT count() FROM %s.answers_current WHERE text = 'v100' AND response_id = '%s'", db, guid(3)), "0")

	// Surveys and sync_state views.
	query(t, fmt.Sprintf("INSERT INTO %s.surveys (survey_id, name, launched_at, ended_at, first_seen, last_seen, updated_at, _version) VALUES (42, 'a', NULL, NULL, now(), now(), now(), 1), (42, 'b', now(), NULL, now(), now(), now(), 2)", db))
	check("surveys_current", fmt.Sprintf("SELECT survey_id, name FROM %s.surveys_current", db), "42\tb")
	query(t, fmt.Sprintf("INSERT INTO %s.sync_state (survey_id, stream, watermark, last_run_at, last_error, synced, updated_at, _version) VALUES (42, 'completed', '2026-08-01 00:00:00', now(), '', 1, now(), 1), (42, 'completed', '2026-08-02 00:00:00', now(), '', 2, now(), 2)", db))
	check("sync_state_current", fmt.Sprintf("SELECT survey_id, stream, watermark, synced FROM %s.sync_state_current", db), "42\tcompleted\t2026-08-02 00:00:00\t2")

	// The example queries of docs/schema.md run here too.
	doc, err := os.ReadFile("../../../docs/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 5 {
		t.Fatalf("docs/schema.md has %d sql blocks", len(blocks))
	}
	for _, b := range blocks {
		if strings.Contains(b[1], "surveysync.survey_") {
			continue // a wide view: TestWideViewOnCurrentClickHouse builds one and queries it
		}
		query(t, strings.ReplaceAll(b[1], "surveysync.", db+"."))
	}
}

// TestClusterDDLParsesOnCurrentClickHouse: every statement of the cluster
// layout (ON CLUSTER, Replicated* engines with the macros, Distributed
// tables, their re-creation) is valid SQL for a current ClickHouse. chdb has
// no cluster nor ZooKeeper to run them, so they are parsed (formatQuery);
// the 2 × 2 cluster tests run them on 18.16.
func TestClusterDDLParsesOnCurrentClickHouse(t *testing.T) {
	stmts, err := clickhouse.SchemaDDL(db+"_cluster", "surveysync_cluster")
	if err != nil {
		t.Fatal(err)
	}
	replicated, distributed := 0, 0
	for _, stmt := range stmts {
		lit := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(stmt) + "'"
		if got := query(t, "SELECT formatQuerySingleLine("+lit+")"); got == "" {
			t.Errorf("empty format of %s", stmt)
		}
		replicated += strings.Count(stmt, "ENGINE = Replicated")
		distributed += strings.Count(stmt, "ENGINE = Distributed(")
	}
	if replicated < 10 || distributed < 10 {
		t.Errorf("%d Replicated and %d Distributed engines in the cluster DDL, want at least 10 of each", replicated, distributed)
	}
}

// TestShardingKeyAgreesWith1816: the sharding key of responses and answers
// gives the same hash on a current ClickHouse as on 18.16 (values taken
// from 18.16.1), so a cluster being upgraded node by node keeps each
// response on its shard.
func TestShardingKeyAgreesWith1816(t *testing.T) {
	for id, want := range map[string]string{
		"00000000-0000-4000-8000-000000000001": "11731209475870689406",
		"da453b67-791e-4d4d-9009-75b1ed8a33c1": "1545787457978443455",
		"0b9d0c1e-7f7e-4bb1-a2f6-3f0e7f7f7f7f": "727320175754006800",
	} {
		if got := query(t, "SELECT cityHash64(toString(toUUID('"+id+"')))"); got != want {
			t.Errorf("cityHash64(toString(%s)) = %s on chdb, %s on 18.16", id, got, want)
		}
	}
}

// TestWideViewOnCurrentClickHouse runs a wide view's query (docs/schema.md,
// "Wide tables") on ClickHouse 26.7: every column kind, a response in two
// versions, a deleted one, one without answers, a retried write.
func TestWideViewOnCurrentClickHouse(t *testing.T) {
	const wdb = "surveysync_chdb_wide"
	stmts, err := clickhouse.SchemaDDL(wdb, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range stmts {
		query(t, stmt)
	}
	ans := func(n int, version uint64, q int64, typ string, ai int, row, choice, other string, label, text string, value string) string {
		// question_index = question id: (page, question, answer index) is
		// the cell's place in the sorting key.
		return fmt.Sprintf(`('%s', 42, 1, 0, %d, %d, '%s', 'Otázka', 'v%d', %d, %s, 'Řádek', NULL, '', %s, '%s', %s, '%s', %s, 'completed', '2026-08-21 11:30:00', %d)`,
			guid(n), q, q, typ, q, ai, row, choice, label, other, text, value, version)
	}
	resp := func(n int, version uint64, deleted int) string {
		return fmt.Sprintf(`('%s', 42, 'Průzkum', 14457, NULL, '10.0.0.1', '2026-08-21 10:30:00', '2026-08-21 11:30:00', 3600, 'completed', ['utm_source'], ['mail'], %d, now(), %d)`,
			guid(n), deleted, version)
	}
	rows := []string{
		ans(1, 1, 1, "single", 0, "NULL", "1", "NULL", "Ano", "", "1"),
		ans(1, 2, 1, "single", 0, "NULL", "2", "NULL", "Spíše ne", "", "2"),
		ans(1, 2, 2, "multiple", 1, "NULL", "5", "NULL", "Hypotéka", "", "NULL"),
		ans(1, 2, 2, "multiple", 0, "NULL", "4", "4", "Jiné", "od kolegy", "NULL"),
		ans(1, 2, 3, "matrix_single", 0, "7", "NULL", "NULL", "", "", "1"),
		ans(1, 2, 4, "scale", 0, "NULL", "NULL", "NULL", "", "", "9"),
		ans(1, 2, 5, "essay", 0, "NULL", "NULL", "NULL", "", "Žluťoučký kůň", "NULL"),
		ans(2, 1, 5, "essay", 0, "NULL", "NULL", "NULL", "", "smazáno", "NULL"),
	}
	for range 2 { // a retried write: identical rows twice
		query(t, fmt.Sprintf(`INSERT INTO %s.answers (response_id, survey_id, page_id, page_index, question_id, question_index,
    question_type, question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label,
    other_id, text, value, response_status, date_completed, _version) VALUES %s`, wdb, strings.Join(rows, ", ")))
	}
	query(t, fmt.Sprintf(`INSERT INTO %s.responses (response_id, survey_id, survey_name, distribution_id, contact_id,
    ip_address, date_created, date_completed, total_time, response_status, url_parameters.name, url_parameters.value,
    is_deleted, synced_at, _version) VALUES %s`, wdb, strings.Join([]string{resp(1, 1, 0), resp(1, 2, 0), resp(2, 1, 0), resp(2, 3, 1), resp(3, 1, 0)}, ", ")))
	cols := []clickhouse.WideColumn{
		{QuestionID: 1, Name: "v1", Kind: clickhouse.KindLabel},
		{QuestionID: 2, Name: "v2", Kind: clickhouse.KindLabels},
		{QuestionID: 2, Part: "other", Name: "v2_other", Kind: clickhouse.KindOther},
		{QuestionID: 3, RowID: 7, Name: "v3_radek", Kind: clickhouse.KindLabel},
		{QuestionID: 4, Name: "v4", Kind: clickhouse.KindNumber},
		{QuestionID: 5, Name: "v5", Kind: clickhouse.KindText},
		{QuestionID: 1, Part: "id", Name: "v1_id", Kind: clickhouse.KindChoiceID},
		{QuestionID: 3, RowID: 7, Part: "id", Name: "v3_radek_id", Kind: clickhouse.KindChoiceID},
	}
	for range 2 { // replaced in place
		query(t, fmt.Sprintf("CREATE OR REPLACE VIEW %s.survey_42 AS\n%s", wdb, clickhouse.WideViewSQL(wdb, 42, cols)))
	}
	got := query(t, fmt.Sprintf("SELECT toString(response_id), _version, v1, v2, v2_other, v3_radek, v4, v5 FROM %s.survey_42 ORDER BY response_id", wdb))
	want := guid(1) + "\t2\tSpíše ne\t['Jiné','Hypotéka']\tod kolegy\t\t9\tŽluťoučký kůň\n" +
		guid(3) + "\t1\t\t[]\t\t\t\\N" // (the last, empty, column trimmed)
	if got != want {
		t.Errorf("wide view:\n got %q\nwant %q", got, want)
	}
	if ids := query(t, fmt.Sprintf("SELECT v1_id, v3_radek_id FROM %s.survey_42 ORDER BY response_id", wdb)); ids != "2\t\\N\n\\N\t\\N" {
		t.Errorf("choice ids: %q", ids)
	}
	one := query(t, fmt.Sprintf("SELECT v1, v4 FROM %s.survey_42 WHERE response_id = '%s'", wdb, guid(1)))
	if one != "Spíše ne\t9" {
		t.Errorf("point lookup: %q", one)
	}
	types := query(t, fmt.Sprintf("SELECT arrayStringConcat(groupArray(type), ',') FROM (SELECT type FROM system.columns WHERE database = '%s' AND table = 'survey_42' AND name LIKE 'v%%' ORDER BY position)", wdb))
	if types != "String,Array(String),String,String,Nullable(Int64),String,Nullable(Int64),Nullable(Int64)" {
		t.Errorf("column types %s", types)
	}
}

// TestHostileColumnNamesOnCurrentClickHouse: a wide view whose column
// names are built to break out of their quotes (a backslash before the
// closing backtick, a backtick, quotes, a newline, control bytes, a
// comment) is created on ClickHouse 26.7 with every name exactly as given:
// the quoting of sink/clickhouse is complete on current releases too (the
// 18.16 side: sink/clickhouse's TestQuoteIdentHostileNames).
func TestHostileColumnNamesOnCurrentClickHouse(t *testing.T) {
	const hdb = "surveysync_chdb_hostile"
	stmts, err := clickhouse.SchemaDDL(hdb, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range stmts {
		query(t, stmt)
	}
	names := []string{`a\`, "a\\`, 1 AS `x", "q`) ENGINE = Memory; DROP DATABASE system; --", `it's "quoted"`,
		"two\nlines\r\t\x01\x7f", "back\\\\slashes\\n", "-- comment", "/* c */ x"}
	var cols []clickhouse.WideColumn
	for i, n := range names {
		cols = append(cols, clickhouse.WideColumn{QuestionID: int64(i + 1), Name: n, Kind: clickhouse.KindText})
	}
	query(t, fmt.Sprintf("CREATE OR REPLACE VIEW %s.survey_42 AS\n%s", hdb, clickhouse.WideViewSQL(hdb, 42, cols)))
	for _, n := range names {
		if got := query(t, fmt.Sprintf("SELECT count() FROM system.columns WHERE database = '%s' AND table = 'survey_42' AND hex(name) = '%X'", hdb, n)); got != "1" {
			t.Errorf("column %q: %s columns of that name in the view", n, got)
		}
	}
	if got := query(t, "SELECT count() FROM system.databases WHERE name = 'system'"); got != "1" {
		t.Error("system is gone")
	}
}

// TestEraseOnCurrentClickHouse: the erasure statements of sink/clickhouse
// (issue 23) run on a current ClickHouse, both as mutations (what 18.16
// runs) and as lightweight DELETE (what 23.3 and later run), and remove the
// erased response's rows from every table and nothing else.
func TestEraseOnCurrentClickHouse(t *testing.T) {
	for _, lightweight := range []bool{false, true} {
		edb := fmt.Sprintf("surveysync_chdb_erase_%t", lightweight)
		stmts, err := clickhouse.SchemaDDL(edb, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range stmts {
			query(t, stmt)
		}
		for n := 1; n <= 2; n++ {
			query(t, fmt.Sprintf("INSERT INTO %s.responses (response_id, survey_id, date_created, _version) VALUES ('%s', 42, now(), 1)", edb, guid(n)))
			query(t, fmt.Sprintf("INSERT INTO %s.answers (response_id, survey_id, _version) VALUES ('%s', 42, 1), ('%s', 42, 1)", edb, guid(n), guid(n)))
			query(t, fmt.Sprintf("INSERT INTO %s.uploaded_files (file_id, response_id, survey_id) VALUES ('%s', '%s', 42)", edb, guid(100+n), guid(n)))
			query(t, fmt.Sprintf("INSERT INTO %s.webhook_events (event_id, survey_id, response_id, received_at) VALUES ('e%d', 42, '%s', now())", edb, n, guid(n)))
			query(t, fmt.Sprintf("INSERT INTO %s.rejects (survey_id, response_id, rejected_at) VALUES (42, '%s', now())", edb, strings.ToUpper(guid(n))))
		}
		erase, err := clickhouse.EraseSQL(edb, lightweight, []warehouse.ResponseKey{{SurveyID: 42, ResponseID: survey.GUID(guid(1))}})
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range erase {
			if lightweight != strings.HasPrefix(stmt, "DELETE FROM") {
				t.Fatalf("lightweight %t: %s", lightweight, stmt)
			}
			query(t, stmt+" SETTINGS mutations_sync = 1")
		}
		for _, table := range []string{"responses", "answers", "uploaded_files", "webhook_events", "rejects"} {
			got := query(t, fmt.Sprintf("SELECT countIf(lower(toString(response_id)) = '%s'), countIf(lower(toString(response_id)) = '%s') FROM %s.%s", guid(1), guid(2), edb, table))
			if got != "0\t1" && !(table == "answers" && got == "0\t2") {
				t.Errorf("lightweight %t: %s: erased, kept rows = %q", lightweight, table, got)
			}
		}
	}
}
