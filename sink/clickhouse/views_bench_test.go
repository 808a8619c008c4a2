package clickhouse

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestViewVariantsTiming measures, on the configured server, the shipped
// views against FINAL-based alternatives with 100k responses (20k of them
// in a second version, 2k deleted) and ~1.1M answers rows. It only runs
// with SURVEYSYNC_BENCH_VIEWS=1:
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 SURVEYSYNC_BENCH_VIEWS=1 \
//	  go test -run TestViewVariantsTiming -v ./sink/clickhouse/
func TestViewVariantsTiming(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_VIEWS") != "1" {
		t.Skip("set SURVEYSYNC_BENCH_VIEWS=1 to time the view variants")
	}
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	exec := func(q string) {
		t.Helper()
		if err := s.Conn().Exec(ctx, strings.ReplaceAll(q, "DB.", s.Database()+".")); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const uuidExpr = "toUUID(concat('00000000-0000-4000-8000-', substring(toString(1000000000000 + number), 2)))"
	respInsert := `INSERT INTO DB.responses (response_id, survey_id, survey_name, distribution_id, contact_id, ip_address,
    date_created, date_completed, total_time, response_status, url_parameters.name, url_parameters.value, is_deleted, synced_at, _version)
SELECT ` + uuidExpr + `, number % 20, 'Průzkum', 14457, NULL, '10.0.0.1',
    toDateTime('2026-08-01 00:00:00', 'UTC') + number, toDateTime('2026-08-01 00:10:00', 'UTC') + number, 600, %STATUS%,
    ['utm_source'], ['mail'], %DELETED%, now(), %VERSION%
FROM numbers(100000) %WHERE%`
	ansInsert := `INSERT INTO DB.answers (response_id, survey_id, page_id, page_index, question_id, question_index, question_type,
    question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label, other_id,
    text, value, response_status, date_completed, _version)
SELECT ` + strings.ReplaceAll(uuidExpr, "number", "intDiv(number, %N%)") + `, intDiv(number, %N%) % 20, 1, 0,
    1000 + number % %N%, number % %N%, 'single_choice', 'Otázka', 'q', 0, NULL, '', NULL, '', 5000 + number % 7, 'Ano', NULL,
    '', number % 11, 'completed', toDateTime('2026-08-01 00:10:00', 'UTC') + intDiv(number, %N%), %VERSION%
FROM numbers(%LIMIT%) %WHERE%`
	r := strings.NewReplacer
	start := time.Now()
	exec(r("%STATUS%", "'completed'", "%DELETED%", "0", "%VERSION%", "1000", "%WHERE%", "").Replace(respInsert))
	exec(r("%STATUS%", "'completed'", "%DELETED%", "0", "%VERSION%", "2000", "%WHERE%", "WHERE number % 5 = 0").Replace(respInsert))
	exec(r("%STATUS%", "'deleted'", "%DELETED%", "1", "%VERSION%", "3000", "%WHERE%", "WHERE number % 50 = 0").Replace(respInsert))
	exec(r("%N%", "9", "%VERSION%", "1000", "%LIMIT%", "900000", "%WHERE%", "").Replace(ansInsert))
	for range 2 { // the second write is a retry: identical rows
		exec(r("%N%", "5", "%VERSION%", "2000", "%LIMIT%", "500000", "%WHERE%", "WHERE intDiv(number, 5) % 5 = 0").Replace(ansInsert))
	}
	t.Logf("generated in %v: responses %d rows, answers %d rows", time.Since(start).Round(time.Millisecond),
		countRows(t, s, "SELECT count() FROM "+s.table("responses")), countRows(t, s, "SELECT count() FROM "+s.table("answers")))

	const answerCols = `response_id, survey_id, page_id, page_index, question_id, question_index, question_type,
    question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label, other_id,
    text, value, response_status, date_completed, _version`
	// The alternatives measured against the shipped (FINAL-based) views.
	exec(`CREATE VIEW DB.responses_argmax AS
SELECT response_id, survey_id,
    tupleElement(latest, 1) AS survey_name, tupleElement(latest, 2) AS distribution_id, tupleElement(latest, 3) AS contact_id,
    tupleElement(latest, 4) AS ip_address, tupleElement(latest, 5) AS date_created, tupleElement(latest, 6) AS date_completed,
    tupleElement(latest, 7) AS total_time, tupleElement(latest, 8) AS response_status,
    tupleElement(latest, 9) AS ` + "`url_parameters.name`" + `, tupleElement(latest, 10) AS ` + "`url_parameters.value`" + `,
    tupleElement(latest, 11) AS synced_at, latest_version AS _version
FROM (
    SELECT survey_id, response_id,
        argMax((survey_name, distribution_id, contact_id, ip_address, date_created, date_completed, total_time,
                response_status, url_parameters.name, url_parameters.value, synced_at, is_deleted), _version) AS latest,
        max(_version) AS latest_version
    FROM DB.responses GROUP BY survey_id, response_id)
WHERE tupleElement(latest, 12) = 0`)
	exec(`CREATE VIEW DB.answers_in_argmax AS
SELECT ` + answerCols + ` FROM DB.answers FINAL
WHERE (response_id, _version) IN (SELECT response_id, latest_version FROM (SELECT response_id, max(_version) AS latest_version,
    argMax(is_deleted, _version) AS deleted FROM DB.responses GROUP BY response_id) WHERE deleted = 0)`)
	exec(`CREATE VIEW DB.answers_final_join AS
SELECT ` + answerCols + ` FROM DB.answers FINAL
ALL INNER JOIN (SELECT response_id, _version FROM (SELECT response_id, _version, is_deleted FROM DB.responses FINAL) WHERE is_deleted = 0)
USING (response_id, _version)`)
	exec(`CREATE VIEW DB.answers_argmax_join AS
SELECT ` + answerCols + ` FROM DB.answers FINAL
ALL INNER JOIN (SELECT response_id, latest_version AS _version FROM (SELECT response_id, max(_version) AS latest_version,
    argMax(is_deleted, _version) AS deleted FROM DB.responses GROUP BY response_id) WHERE deleted = 0)
USING (response_id, _version)`)

	queries := []struct{ name, sql string }{
		{"responses_current (FINAL, shipped): count", "SELECT count() FROM DB.responses_current"},
		{"responses_argmax (argMax tuple): count", "SELECT count() FROM DB.responses_argmax"},
		{"responses_current (FINAL, shipped): by survey", "SELECT survey_id, count(), avg(total_time) FROM DB.responses_current GROUP BY survey_id"},
		{"responses_argmax (argMax tuple): by survey", "SELECT survey_id, count(), avg(total_time) FROM DB.responses_argmax GROUP BY survey_id"},
		{"answers_current (FINAL + IN FINAL, shipped): count", "SELECT count() FROM DB.answers_current"},
		{"answers_in_argmax (FINAL + IN argMax): count", "SELECT count() FROM DB.answers_in_argmax"},
		{"answers_argmax_join (FINAL + JOIN argMax): count", "SELECT count() FROM DB.answers_argmax_join"},
		{"answers_final_join (FINAL + JOIN FINAL): count", "SELECT count() FROM DB.answers_final_join"},
		{"(answers FINAL alone): count", "SELECT count() FROM DB.answers FINAL"},
		{"(answers without FINAL): count", "SELECT count() FROM DB.answers"},
		{"answers_current (shipped): one survey by question", "SELECT question_id, count(), sum(value) FROM DB.answers_current WHERE survey_id = 3 GROUP BY question_id"},
		{"answers_in_argmax: one survey by question", "SELECT question_id, count(), sum(value) FROM DB.answers_in_argmax WHERE survey_id = 3 GROUP BY question_id"},
		{"answers_argmax_join: one survey by question", "SELECT question_id, count(), sum(value) FROM DB.answers_argmax_join WHERE survey_id = 3 GROUP BY question_id"},
		{"answers_final_join: one survey by question", "SELECT question_id, count(), sum(value) FROM DB.answers_final_join WHERE survey_id = 3 GROUP BY question_id"},
	}
	var counts []string
	for _, q := range queries {
		sql := strings.ReplaceAll(q.sql, "DB.", s.Database()+".")
		var runs []time.Duration
		for range 5 {
			start := time.Now()
			rows, err := s.Conn().Query(ctx, sql)
			if err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			rows.Close()
			runs = append(runs, time.Since(start))
		}
		sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
		t.Logf("%-55s median %7.1f ms  (min %6.1f, max %6.1f)", q.name,
			ms(runs[2]), ms(runs[0]), ms(runs[4]))
		if strings.HasSuffix(q.name, "count") {
			counts = append(counts, q.name+"="+firstValue(t, s, sql))
		}
	}
	t.Logf("counts: %s", strings.Join(counts, "; "))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func firstValue(t *testing.T, s *Sink, sql string) string {
	var n uint64
	if err := s.Conn().QueryRow(ctxT(t), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(n, 10)
}
