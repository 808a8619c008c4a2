package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// How the pipeline sees each failed insert: a permanent error is not
// retried (its responses are isolated and rejected; its WriteError is
// marked refused too), a refusal is retried slowly until an operator fixes
// the table, and anything else (the server's transient exceptions, network
// errors, timeouts) is transient and retried at the ordinary pace. The
// sink itself makes one attempt.
func TestWriteErrorClassification(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		err                error
		refused, permanent bool
	}{
		{&ch.Exception{Code: 43, Message: "Unexpected type UUID of argument of function cityHash64"}, true, false},
		{&ch.Exception{Code: 60}, true, false},
		{&ch.Exception{Code: 16}, true, false},
		{&ch.Exception{Code: 164}, true, false},
		{&ch.Exception{Code: 497}, true, false},
		{&ch.Exception{Code: 252}, false, false},
		{&ch.Exception{Code: 242}, false, false},
		{&ch.Exception{Code: 209}, false, false},
		{errors.New("read: connection reset by peer"), false, false},
		{reset, false, false},
		{context.DeadlineExceeded, false, false},
		{permanent.New("bad_value", errors.New("converting []int64 to String is unsupported")), false, true},
		{permanent.New("insert_rejected", &ch.Exception{Code: 53}), true, true},
	} {
		err := fmt.Errorf("clickhouse: insert 3 rows into db.answers: send: %w", c.err)
		if refused(err) != c.refused {
			t.Errorf("%v: refused(err) = %v", c.err, refused(err))
		}
		s := &Sink{opts: Options{Database: "db"}}
		werr := s.writeError("answers", err)
		var we *pipeline.WriteError
		if !errors.As(werr, &we) {
			t.Fatalf("%v: writeError = %T, want a *pipeline.WriteError", c.err, werr)
		}
		if we.Refused != (c.refused || c.permanent) || permanent.Is(werr) != c.permanent {
			t.Errorf("%v: WriteError refused %v permanent %v, want %v %v", c.err, we.Refused, permanent.Is(werr), c.refused || c.permanent, c.permanent)
		}
	}
}

// The password never reaches the pipeline's logs and status, even if an
// error were to quote it.
func TestWriteErrorMasksPassword(t *testing.T) {
	s := &Sink{opts: Options{Password: "s3cr3t-pw", Database: "db"}}
	err := s.writeError("answers", fmt.Errorf("dial: %w", &ch.Exception{Code: 516, Message: "default: Authentication failed: password s3cr3t-pw is incorrect"}))
	var we *pipeline.WriteError
	if !errors.As(err, &we) || we.Table != "answers" || we.Code != 516 || !we.Refused {
		t.Fatalf("writeError = %#v", err)
	}
	if strings.Contains(we.Message, "s3cr3t-pw") || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("password in %q / %q", we.Message, err.Error())
	}
}

// Inserts into a missing table or a table missing a column fail with a
// WriteError naming the table, the server's code and message, marked
// refused (not retried by the sink, not permanent: the pipeline waits),
// counted by code; doctor's CheckWrites names the same table with a fix;
// once restored, both work again.
func TestRefusedInsertIsDescribed(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	done := baseTime.Add(time.Hour)
	rs := []testResponse{{ID: guid(1), SurveyID: 1, Version: 10, Completed: &done, Answers: 3}}
	exec := func(q string) {
		t.Helper()
		if err := s.Conn().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	write := func() error {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		b := buildBatch(mem, rs)
		defer b.Release()
		return s.Write(ctx, b)
	}
	checkFails := func(table string, code int) {
		t.Helper()
		for _, c := range s.CheckWrites(ctx) {
			if c.Table == s.table(table) {
				var we *pipeline.WriteError
				if !errors.As(c.Err, &we) || we.Code != code || c.Fix == "" {
					t.Errorf("CheckWrites(%s) = %v (fix %q), want code %d with a fix", table, c.Err, c.Fix, code)
				}
			} else if c.Err != nil {
				t.Errorf("CheckWrites(%s) = %v, want ok", c.Table, c.Err)
			}
		}
	}
	for _, c := range s.CheckWrites(ctx) {
		if c.Err != nil {
			t.Fatalf("CheckWrites on a fresh database: %s: %v", c.Table, c.Err)
		}
	}

	exec("RENAME TABLE " + s.table("answers") + " TO " + s.table("answers_away"))
	err := write()
	var we *pipeline.WriteError
	if !errors.As(err, &we) || we.Table != "answers" || we.Code != 60 || !we.Refused || permanent.Is(err) ||
		!strings.Contains(we.Message, "answers") {
		t.Fatalf("insert into a missing table: %#v (%v)", we, err)
	}
	if got := testutil.ToFloat64(s.metrics.insertErrors.WithLabelValues("answers", "60")); got != 1 {
		t.Errorf("insert_errors_total{table=answers,code=60} = %v, want 1", got)
	}
	checkFails("answers", 60)
	exec("RENAME TABLE " + s.table("answers_away") + " TO " + s.table("answers"))

	exec("ALTER TABLE " + s.table("responses") + " DROP COLUMN ip_address")
	err = write()
	if !errors.As(err, &we) || we.Table != "responses" || !we.Refused || we.Code == 0 || permanent.Is(err) {
		t.Fatalf("insert into a table missing a column: %#v (%v)", we, err)
	}
	t.Logf("column missing: code %d: %s", we.Code, we.Message)
	checkFails("responses", we.Code)
	exec("ALTER TABLE " + s.table("responses") + " ADD COLUMN ip_address String AFTER contact_id")

	if err := write(); err != nil {
		t.Fatalf("write after the table was restored: %v", err)
	}
	for _, c := range s.CheckWrites(ctx) {
		if c.Err != nil {
			t.Errorf("CheckWrites after restore: %s: %v", c.Table, c.Err)
		}
	}
}

// simFetcher answers every response with three answers; a fetch is a new
// version.
type simFetcher struct{}

func (simFetcher) GetResponse(ctx context.Context, surveyID int64, rid survey.GUID) (*survey.Response, error) {
	return &survey.Response{
		ResponseID: rid, SurveyID: surveyID, ResponseStatus: survey.StatusCompleted, SurveyName: "S",
		DateCreated: survey.Time{Time: baseTime}, DateCompleted: survey.TimeOf(baseTime.Add(time.Hour)),
		Pages: []survey.Page{{ID: 1, Questions: []survey.Question{{ID: 10, Type: "single", Title: "Q", Answers: []survey.Answer{
			{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Ano")}, {ChoiceID: survey.Int(2), ChoiceLabel: survey.Str("Ne")}, {ChoiceID: survey.Int(3), ChoiceLabel: survey.Str("Možná")},
		}}}}},
	}, nil
}

// The pipeline against a real ClickHouse whose tables stop taking rows:
// first the answers table disappears (a refusal, code 60), then a column
// changes to a type the writer cannot convert to (each response refused
// one by one: the table, not the data). Meanwhile no ref is acknowledged,
// the state names the table; once restored, every response is in the
// views exactly once at its latest version, and nothing is in rejects.
func TestPipelineHoldsBatchWhileTableRefuses(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	exec := func(q string) {
		t.Helper()
		if err := s.Conn().Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	p := pipeline.New(pipeline.Options{
		Allocator: mem, MaxRows: 1_000_000, MaxDelay: 20 * time.Millisecond,
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, RefusedRetryMax: 100 * time.Millisecond,
		Rejects: s,
	}, simFetcher{}, s)
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(context.Background()) }()

	var mu sync.Mutex
	acked := map[survey.GUID]int{}
	var ackErrs []error
	submit := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			rid := survey.GUID(guid(i))
			err := p.Submit(ctx, pipeline.Ref{SurveyID: 7, ResponseID: rid, Source: "poll", Done: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					ackErrs = append(ackErrs, err)
					return
				}
				acked[rid]++
			}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	nAcked := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range acked {
			n += c
		}
		return n
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; write status %+v", what, p.WriteStatus())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	submit(0, 20)
	waitFor("the first 20 acks", func() bool { return nAcked() == 20 })

	// 1. The table is gone.
	exec("RENAME TABLE " + s.table("answers") + " TO " + s.table("answers_away"))
	submit(20, 40)
	submit(0, 5) // re-reads: new versions of written responses
	waitFor("the failure to show", func() bool { st := p.WriteStatus(); return st.Failing && st.Attempts >= 3 })
	st := p.WriteStatus()
	t.Logf("table missing: %+v", st)
	if st.Table != "answers" || st.Code != 60 || st.Class != pipeline.WriteRefused || !strings.Contains(st.Message, "answers") {
		t.Fatalf("write status while the table is missing: %+v", st)
	}
	if n := nAcked(); n != 20 {
		t.Fatalf("%d acks while the table is missing, want still 20", n)
	}
	exec("RENAME TABLE " + s.table("answers_away") + " TO " + s.table("answers"))
	waitFor("the held responses", func() bool { return nAcked() == 45 })
	if st := p.WriteStatus(); st.Failing {
		t.Fatalf("still failing after restore: %+v", st)
	}

	// 2. A column takes another type: every response is refused one by one.
	exec("ALTER TABLE " + s.table("answers") + " MODIFY COLUMN question_id String")
	submit(40, 60)
	waitFor("the type refusal to show", func() bool { st := p.WriteStatus(); return st.Failing && st.Attempts >= 2 })
	st = p.WriteStatus()
	t.Logf("column type changed: %+v", st)
	if st.Table != "answers" || st.Class != pipeline.WriteRefused || st.Message == "" {
		t.Fatalf("write status while a column has another type: %+v", st)
	}
	exec("ALTER TABLE " + s.table("answers") + " MODIFY COLUMN question_id Int64")
	waitFor("the held responses", func() bool { return nAcked() == 65 })

	p.CloseInput()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ackErrs) != 0 {
		t.Fatalf("refs acknowledged with errors: %v", ackErrs)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")); n != 60 {
		t.Errorf("responses_current has %d rows, want 60", n)
	}
	if n := countRows(t, s, "SELECT uniqExact(response_id) FROM "+s.table("responses_current")); n != 60 {
		t.Errorf("responses_current has %d distinct responses, want 60", n)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != 180 {
		t.Errorf("answers_current has %d rows, want 180 (3 per response, latest version only)", n)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("rejects")); n != 0 {
		t.Errorf("rejects has %d rows, want 0 (a table problem is not bad data)", n)
	}
}
