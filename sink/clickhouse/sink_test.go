package clickhouse

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

func countRows(t *testing.T, s *Sink, query string) uint64 {
	t.Helper()
	var n uint64
	if err := s.Conn().QueryRow(ctxT(t), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func writeBatch(t testing.TB, s *Sink, rs []testResponse) {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := buildBatch(mem, rs)
	defer b.Release()
	if err := s.Write(ctxT(t), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// writeRetrying writes rs as the pipeline does: a transient failure (not
// permanent, not refused) is written again, at most attempts times in all.
// It returns the failed attempts.
func writeRetrying(t *testing.T, s *Sink, rs []testResponse, attempts int) int {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := buildBatch(mem, rs)
	defer b.Release()
	for n := 1; ; n++ {
		err := s.Write(ctxT(t), b)
		if err == nil {
			return n - 1
		}
		var we *pipeline.WriteError
		if permanent.Is(err) || (errors.As(err, &we) && we.Refused) || n >= attempts {
			t.Fatalf("Write (attempt %d): %v", n, err)
		}
		time.Sleep(backoff.Policy{Initial: 200 * time.Millisecond, Max: 10 * time.Second}.Delay(n))
	}
}

func TestOpenIsIdempotent(t *testing.T) {
	s, _ := openTest(t, nil)
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		t.Fatal(err)
	}
	// Open again on the same database, twice at once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			s2, err := Open(ctxT(t), testOptions(s.Database()))
			if err == nil {
				err = s2.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	if got := countRows(t, s, "SELECT uniqExact(version) FROM "+s.table("schema_migrations")); got != uint64(len(ms)) {
		t.Errorf("schema_migrations holds %d versions, want %d", got, len(ms))
	}
	for _, name := range []string{"responses", "answers", "sync_state", "surveys", "responses_current", "answers_current", "surveys_current", "sync_state_current"} {
		q := "SELECT count() FROM system.tables WHERE database = '" + s.Database() + "' AND name = '" + name + "'"
		if countRows(t, s, q) != 1 {
			t.Errorf("%s.%s missing", s.Database(), name)
		}
	}
	if s.ServerVersion() == "" || s.ServerVersion() == "0.0.0" {
		t.Errorf("ServerVersion() = %q", s.ServerVersion())
	}
	if err := s.Ping(ctxT(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestOpenConcurrentFreshDatabase(t *testing.T) {
	if testAddr() == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	// Three first starts at once: the migrations lock lets one apply
	// the migrations while the others wait (as the daemon's start-up does
	// on a *MigrationsBusyError), so that on a replicated 18.x cluster the
	// same ALTER … ON CLUSTER is never queued twice (docs/operations.md).
	db := randomDB()
	var wg sync.WaitGroup
	sinks := make([]*Sink, 3)
	errs := make([]error, 3)
	waited := make([]int, 3)
	for i := range sinks {
		wg.Go(func() {
			for {
				sinks[i], errs[i] = Open(ctxT(t), testOptions(db))
				var busy *MigrationsBusyError
				if !errors.As(errs[i], &busy) {
					return
				}
				waited[i]++
				time.Sleep(500 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	for i, s := range sinks {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		if i == 0 {
			defer func() {
				_ = dropDatabase(context.Background(), s)
				s.Close()
			}()
		} else {
			s.Close()
		}
	}
	if t.Failed() {
		return
	}
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		t.Fatal(err)
	}
	// Each migration recorded once: applied by one Open only.
	if got := countRows(t, sinks[0], "SELECT count() FROM "+sinks[0].table("schema_migrations")); got != uint64(len(ms)) {
		t.Errorf("schema_migrations holds %d rows for %d migrations: some were applied twice", got, len(ms))
	}
	t.Logf("waits on the migrations lock per Open: %v", waited)
}

// responseView is a row of responses_current.
type responseView struct {
	ResponseID     string
	SurveyID       int64
	SurveyName     string
	DistributionID *int64
	ContactID      *int64
	DateCreated    time.Time
	DateCompleted  *time.Time
	TotalTime      *int64
	Status         string
	ParamNames     []string
	ParamValues    []string
	Version        uint64
}

func readResponses(t *testing.T, s *Sink) []responseView {
	t.Helper()
	rows, err := s.Conn().Query(ctxT(t), `SELECT toString(response_id), survey_id, survey_name, distribution_id, contact_id,
    date_created, date_completed, total_time, response_status, url_parameters.name, url_parameters.value, _version
FROM `+s.table("responses_current")+` ORDER BY response_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []responseView
	for rows.Next() {
		var r responseView
		if err := rows.Scan(&r.ResponseID, &r.SurveyID, &r.SurveyName, &r.DistributionID, &r.ContactID,
			&r.DateCreated, &r.DateCompleted, &r.TotalTime, &r.Status, &r.ParamNames, &r.ParamValues, &r.Version); err != nil {
			t.Fatal(err)
		}
		r.DateCreated = r.DateCreated.UTC()
		if r.DateCompleted != nil {
			u := r.DateCompleted.UTC()
			r.DateCompleted = &u
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// answerKey is what identifies an answers_current row in the tests.
type answerKey struct {
	ResponseID string
	Version    uint64
	Question   int64
	Text       string
}

func readAnswers(t *testing.T, s *Sink) []answerKey {
	t.Helper()
	rows, err := s.Conn().Query(ctxT(t), `SELECT toString(response_id), _version, question_id, text
FROM `+s.table("answers_current")+` ORDER BY response_id, page_index, question_index, answer_index`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []answerKey
	for rows.Next() {
		var a answerKey
		if err := rows.Scan(&a.ResponseID, &a.Version, &a.Question, &a.Text); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func TestWriteReadBack(t *testing.T) {
	s, reg := openTest(t, nil)
	done := baseTime.Add(5 * time.Minute)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 42, Version: 1000, Completed: &done, Answers: 3, Params: [][2]string{{"utm_source", "mail"}, {"město", "Brno"}}},
		{ID: guid(2), SurveyID: 42, Version: 1000, Status: "partial", Answers: 1},
	})
	got := readResponses(t, s)
	want := []responseView{
		{ResponseID: guid(1), SurveyID: 42, SurveyName: "Průzkum 42", DistributionID: ptr(int64(14457)),
			DateCreated: baseTime, DateCompleted: &done, TotalTime: ptr(int64(300)), Status: "completed",
			ParamNames: []string{"utm_source", "město"}, ParamValues: []string{"mail", "Brno"}, Version: 1000},
		{ResponseID: guid(2), SurveyID: 42, SurveyName: "Průzkum 42", ContactID: ptr(int64(4998745)),
			DateCreated: baseTime, Status: "partial", ParamNames: []string{}, ParamValues: []string{}, Version: 1000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("responses_current (-want +got):\n%s", diff)
	}
	if n := len(readAnswers(t, s)); n != 4 {
		t.Errorf("answers_current has %d rows, want 4", n)
	}
	// Every column of one answer.
	var (
		rowID, columnID, value *int64
		rowLabel, title, text  string
		pageIndex, qIndex      uint16
		completed              *time.Time
	)
	err := s.Conn().QueryRow(ctxT(t), `SELECT row_id, column_id, value, row_label, question_title, text, page_index, question_index, date_completed
FROM `+s.table("answers_current")+` WHERE response_id = toUUID('`+guid(1)+`') AND question_id = 1000`).
		Scan(&rowID, &columnID, &value, &rowLabel, &title, &text, &pageIndex, &qIndex, &completed)
	if err != nil {
		t.Fatal(err)
	}
	if rowID == nil || *rowID != 0 || columnID != nil || value == nil || *value != 0 || rowLabel != "řádek" ||
		title != "Otázka 0: jak se vám líbí?" || text != "text v1000" || completed == nil || !completed.Equal(done) {
		t.Errorf("answer row: row_id=%v column_id=%v value=%v row_label=%q title=%q text=%q completed=%v",
			rowID, columnID, value, rowLabel, title, text, completed)
	}
	if got := testutil.ToFloat64(s.metrics.rowsWritten.WithLabelValues("answers")); got != 4 {
		t.Errorf("rows_written_total{table=answers} = %v, want 4", got)
	}
	if got := testutil.ToFloat64(s.metrics.rowsWritten.WithLabelValues("responses")); got != 2 {
		t.Errorf("rows_written_total{table=responses} = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "surveysync_clickhouse_batch_rows", "surveysync_clickhouse_insert_duration_seconds"); err != nil || n != 4 {
		t.Errorf("histograms: %d series, %v", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}

func TestWriteSameBatchTenTimes(t *testing.T) {
	s, _ := openTest(t, nil)
	done := baseTime.Add(time.Hour)
	var rs []testResponse
	for i := range 50 {
		rs = append(rs, testResponse{ID: guid(i), SurveyID: int64(1 + i%3), Version: 7, Completed: &done, Answers: 4})
	}
	// Keep the ten writes in ten parts so the views, not merges, must
	// hide the duplicates.
	for _, table := range []string{"responses", "answers"} {
		if err := s.Conn().Exec(ctxT(t), "SYSTEM STOP MERGES "+s.table(table)); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		writeBatch(t, s, rs)
	}
	// On a replicated cluster the replicas deduplicate the nine repeated
	// blocks (replicated block deduplication) before any merge.
	wantRaw := uint64(500)
	if s.tmpl.Replicated {
		wantRaw = 50
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses")); n != wantRaw {
		t.Fatalf("raw responses rows = %d, want %d (10 unmerged writes)", n, wantRaw)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")); n != 50 {
		t.Errorf("responses_current has %d rows, want 50", n)
	}
	if n := countRows(t, s, "SELECT uniqExact(response_id) FROM "+s.table("responses_current")); n != 50 {
		t.Errorf("responses_current has %d distinct responses, want 50", n)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != 200 {
		t.Errorf("answers_current has %d rows, want 200", n)
	}
	// After merges the raw tables collapse too.
	for _, table := range []string{"responses", "answers"} {
		if err := s.Conn().Exec(ctxT(t), "SYSTEM START MERGES "+s.table(table)); err != nil {
			t.Fatal(err)
		}
		optimizeFinal(t, s, table)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers")); n != 200 {
		t.Errorf("answers after OPTIMIZE FINAL has %d rows, want 200", n)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != 200 {
		t.Errorf("answers_current after OPTIMIZE has %d rows, want 200", n)
	}
}

// A filter on responses_current must not bring back the version before a
// deletion. That a deletion leaves the current rows is the warehouse
// suite's.
func TestDeletedResponseLeavesViews(t *testing.T) {
	s, _ := openTest(t, nil)
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 5}})
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 300, Deleted: true}})
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")+" WHERE response_status = 'completed' AND response_id = toUUID('"+guid(1)+"')"); n != 0 {
		t.Errorf("filtered responses_current shows the deleted response's old version")
	}
}

// A crash between the answers insert and the responses insert: the views
// keep showing the previous version, complete.
func TestCrashBetweenInserts(t *testing.T) {
	s, _ := openTest(t, nil)
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 5}})

	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := buildBatch(mem, []testResponse{{ID: guid(1), SurveyID: 1, Version: 200, Completed: &done, Answers: 2}})
	defer b.Release()
	if err := s.insertRecord(ctxT(t), flatten.TableAnswers, b.Answers, flatten.AnswersSchema); err != nil {
		t.Fatal(err)
	}
	got := readAnswers(t, s)
	if len(got) != 5 || got[0].Version != 100 {
		t.Errorf("after answers-only write: answers_current = %v, want the 5 answers of version 100", got)
	}
	// The retry of the whole batch completes version 200.
	if err := s.Write(ctxT(t), b); err != nil {
		t.Fatal(err)
	}
	got = readAnswers(t, s)
	if len(got) != 2 || got[0].Version != 200 {
		t.Errorf("after retry: answers_current = %v, want the 2 answers of version 200", got)
	}
}

func TestWriteRejectsBadData(t *testing.T) {
	s, _ := openTest(t, nil)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := buildBatch(mem, []testResponse{{ID: "not-a-guid", SurveyID: 1, Version: 1, Answers: 1}})
	defer b.Release()
	start := time.Now()
	err := s.Write(ctxT(t), b)
	if err == nil {
		t.Fatal("Write accepted a bad GUID")
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("bad data was retried: %v", err)
	}
	if !permanent.Is(err) || permanent.Reason(err) != "bad_value" {
		t.Errorf("bad data: err = %v (reason %q), want a permanent error with reason bad_value", err, permanent.Reason(err))
	}
	if got := testutil.ToFloat64(s.metrics.insertErrors.WithLabelValues("answers", "none")); got != 1 {
		t.Errorf("insert_errors_total{table=answers} = %v, want 1", got)
	}
}

// Sub-second watermarks are truncated down, never rounded up, and
// sync_state_current and surveys_current show one row each. The round
// trip is the warehouse suite's.
func TestStatesInClickHouse(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	w1 := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	st := pipeline.StreamState{SurveyID: 42, Stream: pipeline.StreamCompleted, Watermark: w1.Add(900 * time.Millisecond), UpdatedAt: w1}
	for range 2 {
		if err := s.SaveStates(ctx, []pipeline.StreamState{st}); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveSurveys(ctx, []pipeline.SurveyInfo{{SurveyID: 42, Name: "Průzkum", FirstSeen: w1, LastSeen: w1}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.LoadStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Watermark.Equal(w1) {
		t.Errorf("states %+v, want one with watermark %v", got, w1)
	}
	for _, view := range []string{"sync_state_current", "surveys_current"} {
		if n := countRows(t, s, "SELECT count() FROM "+s.table(view)); n != 1 {
			t.Errorf("%s has %d rows, want 1", view, n)
		}
	}
}

// HasResponse refuses an id that is not a GUID: nothing but a GUID
// reaches its SQL. Its answers are the warehouse suite's.
func TestHasResponse(t *testing.T) {
	s, _ := openTest(t, nil)
	if _, err := s.HasResponse(ctxT(t), 1, "x'); DROP TABLE t; --"); err == nil {
		t.Error("a malformed id was not refused")
	}
}
