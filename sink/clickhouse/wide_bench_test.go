package clickhouse

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestWideViewTiming measures the wide view of a survey of 100,000
// responses × 50 questions (20 single choice, 5 multiple choice, 5 matrices
// of 5 rows, 5 scales, 10 open texts, 5 multiple-answer matrices of 2 rows:
// 95 answer cells per response, 9.5M answers rows; 10% of the responses in
// a second version, 1% deleted): a full scan and a point lookup. It only
// runs with SURVEYSYNC_BENCH_WIDE=1:
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 SURVEYSYNC_BENCH_WIDE=1 \
//	  go test -count=1 -run TestWideViewTiming -v ./sink/clickhouse/
//
// SURVEYSYNC_BENCH_WIDE_DB keeps the data in that database (and reuses it);
// SURVEYSYNC_BENCH_WIDE_ONLY runs only the queries whose name contains it.
func TestWideViewTiming(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_WIDE") != "1" {
		t.Skip("set SURVEYSYNC_BENCH_WIDE=1 to time the wide view")
	}
	var s *Sink
	if db := os.Getenv("SURVEYSYNC_BENCH_WIDE_DB"); db != "" {
		// Kept afterwards, for trying queries by hand.
		var err error
		if s, err = Open(ctxT(t), testOptions(db)); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	} else {
		s, _ = openTest(t, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	exec := func(q string) {
		t.Helper()
		if err := s.Conn().Exec(ctx, strings.ReplaceAll(q, "DB.", s.Database()+".")); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const survey = 777
	const uuidExpr = "toUUID(concat('00000000-0000-4000-8000-', substring(toString(1000000000000 + R), 2)))"
	respInsert := `INSERT INTO DB.responses (response_id, survey_id, survey_name, distribution_id, contact_id, ip_address,
    date_created, date_completed, total_time, response_status, url_parameters.name, url_parameters.value, is_deleted, synced_at, _version)
SELECT ` + strings.ReplaceAll(uuidExpr, "R", "number") + `, 777, 'Průzkum spokojenosti', 14457, NULL, '10.0.0.1',
    toDateTime('2026-08-01 00:00:00', 'UTC') + number, toDateTime('2026-08-01 00:10:00', 'UTC') + number, 600, %STATUS%,
    ['utm_source'], ['mail'], %DELETED%, now(), %VERSION%
FROM numbers(100000) %WHERE%`
	// Cell c of response R: questions 0-19 single, 20-24 multiple (3 cells),
	// 25-29 matrix (5 rows), 30-34 scale, 35-44 essay, 45-49 matrix_multiple
	// (2 rows × 2 cells).
	ansInsert := `INSERT INTO DB.answers (response_id, survey_id, page_id, page_index, question_id, question_index, question_type,
    question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label, other_id,
    text, value, response_status, date_completed, _version)
SELECT ` + uuidExpr + `, 777, 1 + intDiv(q, 10), intDiv(q, 10), 1000 + q, q % 10,
    multiIf(q < 20, 'single', q < 25, 'multiple', q < 30, 'matrix_single', q < 35, 'scale', q < 45, 'essay', 'matrix_multiple'),
    concat('Otázka č. ', toString(q)), concat('otazka_', toString(q)), a,
    if(rw = 0, NULL, toInt64(rw)), if(rw = 0, '', concat('Řádek ', toString(rw))),
    if((q >= 25 AND q < 30) OR q >= 45, toNullable(toInt64(50 + (R + c) % 5)), NULL),
    if((q >= 25 AND q < 30) OR q >= 45, concat('Sloupec ', toString((R + c) % 5)), ''),
    if(q < 25, toNullable(toInt64(100 + (R + c) % 5)), NULL), if(q < 25, concat('Možnost ', toString((R + c) % 5)), ''),
    NULL, if(q >= 35 AND q < 45, concat('Příliš žluťoučký kůň ', toString(R)), ''),
    if(q >= 30 AND q < 35, toNullable(toInt64((R + c) % 11)), NULL),
    'completed', toDateTime('2026-08-01 00:10:00', 'UTC') + R, %VERSION%
FROM (
    SELECT intDiv(number, 95) AS R, number % 95 AS c,
        multiIf(c < 20, c, c < 35, 20 + intDiv(c - 20, 3), c < 60, 25 + intDiv(c - 35, 5), c < 75, c - 30, 45 + intDiv(c - 75, 4)) AS q,
        multiIf(c < 20, 0, c < 35, (c - 20) % 3, c < 60, (c - 35) % 5, c < 75, 0, (c - 75) % 4) AS a,
        multiIf(c < 35, 0, c < 60, 1 + (c - 35) % 5, c < 75, 0, 1 + intDiv((c - 75) % 4, 2)) AS rw
    FROM numbers(9500000)
) %WHERE%`
	r := strings.NewReplacer
	start := time.Now()
	if countRows(t, s, "SELECT count() FROM "+s.table("responses")) == 0 { // else: a kept database
		generate := func() {
			exec(r("%STATUS%", "'completed'", "%DELETED%", "0", "%VERSION%", "1000", "%WHERE%", "").Replace(respInsert))
			exec(r("%STATUS%", "'completed'", "%DELETED%", "0", "%VERSION%", "2000", "%WHERE%", "WHERE number % 10 = 0").Replace(respInsert))
			exec(r("%STATUS%", "'deleted'", "%DELETED%", "1", "%VERSION%", "3000", "%WHERE%", "WHERE number % 100 = 1").Replace(respInsert))
			exec(r("%VERSION%", "1000", "%WHERE%", "").Replace(ansInsert))
			exec(r("%VERSION%", "2000", "%WHERE%", "WHERE R % 10 = 0").Replace(ansInsert))
		}
		generate()
	}
	t.Logf("generated in %v: responses %d rows, answers %d rows", time.Since(start).Round(time.Millisecond),
		countRows(t, s, "SELECT count() FROM "+s.table("responses")), countRows(t, s, "SELECT count() FROM "+s.table("answers")))
	start = time.Now()
	views, err := s.RefreshWideViews(ctx, survey)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wide_columns from the answers and the view created in %v: %d columns", time.Since(start).Round(time.Millisecond), len(views[0].Columns))

	view := s.table(WideViewName(survey))
	lookup := "WHERE response_id = toUUID('00000000-0000-4000-8000-000000054320')"
	queries := []struct{ name, sql string }{
		{"full scan: SELECT * (every row, every column)", "SELECT * FROM " + view},
		{"full scan, pushdown on", "SELECT * FROM " + view + " SETTINGS enable_optimize_predicate_expression = 1"},
		{"count()", "SELECT count() FROM " + view},
		{"one question by status", "SELECT response_status, otazka_3, count() FROM " + view + " GROUP BY response_status, otazka_3"},
		{"point lookup, 18.16 default profile", "SELECT * FROM " + view + " " + lookup},
		{"point lookup, enable_optimize_predicate_expression=1", "SELECT * FROM " + view + " " + lookup + " SETTINGS enable_optimize_predicate_expression = 1"},
		{"(long: answers_current of one response)", "SELECT * FROM " + s.table("answers_current") + " WHERE survey_id = 777 AND response_id = toUUID('00000000-0000-4000-8000-000000054320')"},
	}
	only := os.Getenv("SURVEYSYNC_BENCH_WIDE_ONLY") // a part of the queries' names, e.g. "point lookup"
	for _, q := range queries {
		if only != "" && !strings.Contains(q.name, only) {
			continue
		}
		var runs []time.Duration
		var n int
		for range 11 {
			start := time.Now()
			rows, err := s.Conn().Query(ctx, q.sql)
			if err != nil {
				t.Errorf("%s: %v", q.name, err)
				break
			}
			n = 0
			for rows.Next() {
				n++
			}
			if err := rows.Err(); err != nil {
				t.Errorf("%s: %v", q.name, err)
			}
			rows.Close()
			runs = append(runs, time.Since(start))
		}
		if len(runs) < 11 {
			continue
		}
		sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
		t.Logf("%-55s %7d rows  median %8.1f ms  (min %8.1f, max %8.1f; 11 runs)", q.name, n, ms(runs[5]), ms(runs[0]), ms(runs[10]))
	}
}
