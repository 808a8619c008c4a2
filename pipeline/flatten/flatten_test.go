package flatten

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	testVersion = uint64(1_700_000_000_123_456_789)
)

var testSyncedAt = time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)

// caseItem is testdata/<case>/item.json: a stand-in for a detail-less item
// (the API answered 404).
type caseItem struct {
	SurveyID   int64       `json:"survey_id"`
	ResponseID survey.GUID `json:"response_id"`
	Deleted    bool        `json:"deleted"`
}

func loadCase(t *testing.T, dir string) Item {
	t.Helper()
	it := Item{Version: testVersion, SyncedAt: testSyncedAt}
	if raw, err := os.ReadFile(filepath.Join(dir, "response.json")); err == nil {
		var r survey.Response
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		it.Response, it.SurveyID, it.ResponseID = &r, r.SurveyID, r.ResponseID
		return it
	}
	raw, err := os.ReadFile(filepath.Join(dir, "item.json"))
	if err != nil {
		t.Fatalf("%s: want response.json or item.json: %v", dir, err)
	}
	var ci caseItem
	if err := json.Unmarshal(raw, &ci); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	it.SurveyID, it.ResponseID, it.Deleted = ci.SurveyID, ci.ResponseID, ci.Deleted
	return it
}

func TestGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 12 {
		t.Fatalf("found %d golden cases, want at least 12", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := NewBuilder(mem)
			defer b.Release()
			if err := b.Add(loadCase(t, dir)); err != nil {
				t.Fatal(err)
			}
			batch := b.Flush()
			defer batch.Release()
			checkBatch(t, batch)
			var got bytes.Buffer
			renderRecord(&got, TableResponses, batch.Responses)
			renderRecord(&got, TableAnswers, batch.Answers)

			golden := filepath.Join(dir, "expected.jsonl")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got.String()); diff != "" {
				t.Errorf("rows differ from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

// checkBatch validates the records' shape against the schemas.
func checkBatch(t *testing.T, b *Batch) {
	t.Helper()
	for _, rec := range []arrow.RecordBatch{b.Responses, b.Answers} {
		for i, col := range rec.Columns() {
			if int64(col.Len()) != rec.NumRows() {
				t.Fatalf("column %s has %d rows, record %d", rec.ColumnName(i), col.Len(), rec.NumRows())
			}
			if !arrow.TypeEqual(col.DataType(), rec.Schema().Field(i).Type) {
				t.Fatalf("column %s has type %s", rec.ColumnName(i), col.DataType())
			}
			if !rec.Schema().Field(i).Nullable && col.NullN() > 0 {
				t.Fatalf("column %s is not nullable but has %d nulls", rec.ColumnName(i), col.NullN())
			}
		}
	}
	if !b.Responses.Schema().Equal(ResponsesSchema) || !b.Answers.Schema().Equal(AnswersSchema) {
		t.Fatal("batch schemas differ from the contract")
	}
}

// renderRecord writes each row as a JSON object with the table name and
// the columns in schema order; timestamps in RFC 3339 with milliseconds.
func renderRecord(w *bytes.Buffer, table string, rec arrow.RecordBatch) {
	for row := 0; row < int(rec.NumRows()); row++ {
		fmt.Fprintf(w, `{"table":%q`, table)
		for c, col := range rec.Columns() {
			name, _ := json.Marshal(rec.ColumnName(c))
			v, _ := json.Marshal(cellValue(col, row))
			fmt.Fprintf(w, ",%s:%s", name, v)
		}
		w.WriteString("}\n")
	}
}

func cellValue(col arrow.Array, i int) any {
	if col.IsNull(i) {
		return nil
	}
	switch a := col.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Uint64:
		return a.Value(i)
	case *array.Uint16:
		return a.Value(i)
	case *array.Uint8:
		return a.Value(i)
	case *array.Timestamp:
		return a.Value(i).ToTime(arrow.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	case *array.List:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues().(*array.String)
		out := []string{}
		for j := start; j < end; j++ {
			out = append(out, vals.Value(int(j)))
		}
		return out
	}
	panic(fmt.Sprintf("unhandled type %s", col.DataType()))
}

func mustCase(t *testing.T, name string) Item {
	t.Helper()
	return loadCase(t, filepath.Join("testdata", name))
}

func TestAddAppendsNothingOnError(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem)
	defer b.Release()

	good := mustCase(t, "multiple")
	if err := b.Add(good); err != nil {
		t.Fatal(err)
	}
	r0, a0 := b.Rows()
	bytes0 := b.Bytes()

	tooMany := mustCase(t, "matrix")
	big := *tooMany.Response
	big.Pages = append([]survey.Page(nil), big.Pages...)
	big.Pages = append(big.Pages, survey.Page{ID: 9, Questions: []survey.Question{{ID: 99, Type: "essay", Answers: make([]survey.Answer, 70000)}}})
	tooMany.Response = &big

	mismatch := mustCase(t, "single")
	mismatch.SurveyID = 1

	otherID := mustCase(t, "single")
	otherID.ResponseID = survey.MustGUID("00000000-0000-4000-8000-000000000000")

	manyInAll := mustCase(t, "single")
	many := *manyInAll.Response
	many.Pages = []survey.Page{{ID: 1, Questions: []survey.Question{
		{ID: 1, Type: "essay", Answers: make([]survey.Answer, 40000)},
		{ID: 2, Type: "essay", Answers: make([]survey.Answer, 30000)},
	}}}
	manyInAll.Response = &many

	withDate := func(created, completed time.Time) Item {
		it := mustCase(t, "single")
		r := *it.Response
		r.DateCreated = survey.Time{Time: created}
		r.DateCompleted = survey.TimeOf(completed)
		it.Response = &r
		return it
	}
	ok := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

	badFile := mustCase(t, "upload")
	bf := *badFile.Response
	bf.Pages = []survey.Page{{ID: 1, Questions: []survey.Question{{ID: 7, Type: "file_upload", Answers: []survey.Answer{
		{FileID: ptr(survey.GUID("report.pdf"))},
	}}}}}
	badFile.Response = &bf

	cases := map[string]struct {
		it     Item
		reason string
	}{
		"too many answers":         {tooMany, ReasonTooManyAnswers},
		"too many answers in all":  {manyInAll, ReasonTooManyAnswers},
		"survey id mismatch":       {mismatch, ReasonIDMismatch},
		"response id differs":      {otherID, ReasonIDMismatch},
		"bad guid":                 {Item{SurveyID: 1, ResponseID: "not-a-guid", Deleted: true}, ReasonBadResponseID},
		"no detail":                {Item{SurveyID: 1, ResponseID: survey.MustGUID("00000000-0000-4000-8000-000000000001")}, ReasonNoDetail},
		"completed in 2200":        {withDate(ok, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)), ReasonDateOutOfRange},
		"completed after 2106":     {withDate(ok, time.Unix(MaxUnixSeconds+1, 0)), ReasonDateOutOfRange},
		"created in 1960":          {withDate(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), ok), ReasonDateOutOfRange},
		"created just before 1970": {withDate(time.Unix(0, -int64(time.Millisecond)), ok), ReasonDateOutOfRange},
		"file id not a GUID":       {badFile, ReasonBadFileID},
	}
	for name, c := range cases {
		it := c.it
		err := b.Add(it)
		if err == nil {
			t.Errorf("%s: Add succeeded, want an error", name)
			continue
		}
		if !permanent.Is(err) || permanent.Reason(err) != c.reason {
			t.Errorf("%s: err = %v (permanent %v, reason %q), want a permanent error with reason %q", name, err, permanent.Is(err), permanent.Reason(err), c.reason)
		}
		if !strings.Contains(err.Error(), string(it.ResponseID)) {
			t.Errorf("%s: error %q does not name response %s", name, err, it.ResponseID)
		}
		if r, a := b.Rows(); r != r0 || a != a0 || b.Bytes() != bytes0 {
			t.Errorf("%s: rows %d/%d bytes %d after failed Add, want %d/%d %d", name, r, a, b.Bytes(), r0, a0, bytes0)
		}
	}

	// The edges of the range are accepted.
	for _, it := range []Item{
		withDate(time.Unix(0, 0), time.Unix(MaxUnixSeconds, 0)),
		withDate(time.Time{}, time.Unix(MaxUnixSeconds, int64(999*time.Millisecond))),
	} {
		b3 := NewBuilder(mem)
		if err := b3.Add(it); err != nil {
			t.Errorf("edge of the date range: %v", err)
		}
		b3.Flush().Release()
		b3.Release()
	}

	batch := b.Flush()
	defer batch.Release()
	checkBatch(t, batch)
	if r, a := batch.Rows(); r != int64(r0) || a != int64(a0) {
		t.Fatalf("batch rows %d/%d, want %d/%d", r, a, r0, a0)
	}
	// Same content as a batch of the good item alone.
	b2 := NewBuilder(mem)
	defer b2.Release()
	if err := b2.Add(good); err != nil {
		t.Fatal(err)
	}
	want := b2.Flush()
	defer want.Release()
	if !array.RecordEqual(batch.Responses, want.Responses) || !array.RecordEqual(batch.Answers, want.Answers) {
		t.Error("failed Adds left rows behind")
	}
	if batch.Token != want.Token {
		t.Error("failed Adds changed the token")
	}
}

func TestBatchesAndTokens(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem)
	defer b.Release()

	names := []string{"single", "multiple", "matrix", "deleted", "partial"}
	var wantAnswers int
	addAll := func(version uint64) *Batch {
		t.Helper()
		wantAnswers = 0
		for _, n := range names {
			it := mustCase(t, n)
			it.Version = version
			if err := b.Add(it); err != nil {
				t.Fatal(err)
			}
		}
		if b.Bytes() <= 0 {
			t.Error("Bytes() = 0 after Add")
		}
		r, a := b.Rows()
		if r != len(names) {
			t.Errorf("Rows() = %d responses, want %d", r, len(names))
		}
		wantAnswers = a
		return b.Flush()
	}

	b1 := addAll(1)
	defer b1.Release()
	checkBatch(t, b1)
	if r, a := b.Rows(); r != 0 || a != 0 || b.Bytes() != 0 {
		t.Fatalf("after Flush: rows %d/%d bytes %d, want zero", r, a, b.Bytes())
	}
	if got := b1.Answers.NumRows(); got != int64(wantAnswers) {
		t.Fatalf("answers rows %d, want %d", got, wantAnswers)
	}
	// Response rows come in Add order; answers are grouped per response in order.
	ids := b1.Responses.Column(0).(*array.String)
	for i, n := range names {
		if want := strings.ToLower(string(mustCase(t, n).ResponseID)); ids.Value(i) != want {
			t.Errorf("row %d: response_id %s, want %s", i, ids.Value(i), want)
		}
	}

	b2 := addAll(1) // same content, reserved builders
	defer b2.Release()
	checkBatch(t, b2)
	if b1.Token != b2.Token || len(b1.Token) != 32 {
		t.Errorf("tokens %q and %q: want equal 32-hex tokens for equal content", b1.Token, b2.Token)
	}
	if !array.RecordEqual(b1.Responses, b2.Responses) || !array.RecordEqual(b1.Answers, b2.Answers) {
		t.Error("second batch of the same items differs")
	}

	b3 := addAll(2)
	defer b3.Release()
	if b3.Token == b1.Token {
		t.Error("token ignores the version")
	}

	empty := b.Flush()
	defer empty.Release()
	checkBatch(t, empty)
	if r, a := empty.Rows(); r != 0 || a != 0 {
		t.Errorf("empty flush has %d/%d rows", r, a)
	}
}

func BenchmarkAdd(b *testing.B) {
	mem := memory.NewGoAllocator()
	items := benchItems(b, 1000)
	bld := NewBuilder(mem)
	defer bld.Release()
	answers := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it := items[i%len(items)]
		if err := bld.Add(it); err != nil {
			b.Fatal(err)
		}
		if r, a := bld.Rows(); r >= 5000 {
			answers += a
			bld.Flush().Release()
		}
	}
	_, a := bld.Rows()
	answers += a
	bld.Flush().Release()
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/sec, "responses/s")
	b.ReportMetric(float64(answers)/sec, "answers/s")
}

// benchItems builds n responses shaped like the emulator's: 5 pages of 6
// questions (single, multiple, matrix, essay with Czech text, url
// parameter), about 45 answer cells per response.
func benchItems(tb testing.TB, n int) []Item {
	tb.Helper()
	out := make([]Item, n)
	done := survey.TimeOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for i := range out {
		r := &survey.Response{
			ResponseID:     survey.GUID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)),
			SurveyID:       4574,
			DistributionID: new(int64),
			SurveyName:     "Spokojenost zákazníků 2026",
			IPAddress:      "192.0.2.10",
			DateCreated:    survey.Time{Time: done.Add(-10 * time.Minute)},
			DateCompleted:  done,
			TotalTime:      survey.Int(600),
			ResponseStatus: survey.StatusCompleted,
			URLParameters:  []survey.URLParameter{{Name: "utm_source", Value: "newsletter"}},
		}
		for p := 0; p < 5; p++ {
			page := survey.Page{ID: int64(100 + p)}
			for q := 0; q < 6; q++ {
				qq := survey.Question{ID: int64(1000 + p*10 + q), Title: "Jak jste spokojeni s naší službou?", Variable: fmt.Sprintf("q%d_%d", p, q)}
				switch q {
				case 0, 1:
					qq.Type = "single"
					qq.Answers = []survey.Answer{{ChoiceID: survey.Int(3), ChoiceLabel: survey.Str("Spokojen"), Value: survey.Int(3)}}
				case 2:
					qq.Type = "multiple"
					for c := 0; c < 3; c++ {
						qq.Answers = append(qq.Answers, survey.Answer{ChoiceID: survey.Int(int64(c)), ChoiceLabel: survey.Str("Možnost"), Value: survey.Int(int64(c))})
					}
				case 3:
					qq.Type = "matrix"
					for row := 0; row < 3; row++ {
						qq.Answers = append(qq.Answers, survey.Answer{RowID: survey.Int(int64(row)), RowLabel: survey.Str("Cena"), ColumnID: survey.Int(2), ColumnLabel: survey.Str("Dobrá"), Value: survey.Int(2)})
					}
				case 4:
					qq.Type = "essay"
					qq.Answers = []survey.Answer{{Text: survey.Str("Příliš žluťoučký kůň úpěl ďábelské ódy.")}}
				case 5:
					qq.Type = "url_parameter"
					qq.Answers = []survey.Answer{{Text: survey.Str("newsletter")}}
				}
				page.Questions = append(page.Questions, qq)
			}
			r.Pages = append(r.Pages, page)
		}
		out[i] = Item{Response: r, SurveyID: r.SurveyID, ResponseID: r.ResponseID, Version: uint64(i + 1), SyncedAt: done.Time}
	}
	return out
}

// FuzzAdd feeds arbitrary details to Add: it must never panic, must append
// a whole item or nothing, and must produce records of the contract's shape.
func FuzzAdd(f *testing.F) {
	dirs, _ := filepath.Glob("testdata/*/response.json")
	for _, d := range dirs {
		raw, err := os.ReadFile(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, false)
	}
	f.Add([]byte(`{"response_id":"x","pages":[{"questions":[{"answers":[{}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, raw []byte, deleted bool) {
		var r survey.Response
		if json.Unmarshal(raw, &r) != nil {
			return
		}
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		b := NewBuilder(mem)
		defer b.Release()
		it := Item{Response: &r, SurveyID: r.SurveyID, ResponseID: r.ResponseID, Deleted: deleted, Version: 7, SyncedAt: testSyncedAt}
		wantAnswers := 0
		for _, p := range r.Pages {
			for _, q := range p.Questions {
				wantAnswers += len(q.Answers)
			}
		}
		err := b.Add(it)
		resp, ans := b.Rows()
		switch {
		case err != nil:
			if resp != 0 || ans != 0 {
				t.Fatalf("failed Add left %d/%d rows", resp, ans)
			}
		case deleted || r.ResponseStatus == survey.StatusDeleted:
			if resp != 1 || ans != 0 {
				t.Fatalf("deleted item gave %d/%d rows", resp, ans)
			}
		default:
			if resp != 1 || ans != wantAnswers {
				t.Fatalf("rows %d/%d, want 1/%d", resp, ans, wantAnswers)
			}
		}
		batch := b.Flush()
		defer batch.Release()
		checkBatch(t, batch)
	})
}

// After a burst, an idle builder holds next to nothing and the reservation
// for later small batches decays.
func TestReservationDecays(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem)
	defer b.Release()
	items := benchItems(t, 2000)
	for _, it := range items {
		if err := b.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	big := mem.CurrentAlloc()
	b.Flush().Release()
	if idle := mem.CurrentAlloc(); idle > 64<<10 {
		t.Errorf("idle builder holds %d bytes after a flush", idle)
	}
	var last int
	for range 20 {
		if err := b.Add(items[0]); err != nil {
			t.Fatal(err)
		}
		last = mem.CurrentAlloc()
		b.Flush().Release()
	}
	if last > big/100 {
		t.Errorf("a one-response batch holds %d bytes after 20 small batches (burst: %d)", last, big)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSliceIsTheBatchOfItsResponses: a slice of a batch has exactly the
// rows, and the token, of a batch built from its responses alone, for every
// range (empty, one response, deleted and partial ones, the whole batch),
// and releasing slices and batch leaves no buffer behind.
func TestSliceIsTheBatchOfItsResponses(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := NewBuilder(mem)
	defer b.Release()
	var items []Item
	for i, n := range []string{"single", "deleted", "multiple", "matrix", "partial"} {
		it := mustCase(t, n)
		it.Version = uint64(10 + i)
		items = append(items, it)
	}
	build := func(its []Item) *Batch {
		t.Helper()
		for _, it := range its {
			if err := b.Add(it); err != nil {
				t.Fatal(err)
			}
		}
		return b.Flush()
	}
	whole := build(items)
	defer whole.Release()
	render := func(x *Batch) string {
		var w bytes.Buffer
		renderRecord(&w, "responses", x.Responses)
		renderRecord(&w, "answers", x.Answers)
		return w.String()
	}
	for lo := 0; lo <= len(items); lo++ {
		for hi := lo; hi <= len(items); hi++ {
			want := build(items[lo:hi])
			got := whole.Slice(lo, hi)
			checkBatch(t, got)
			if got.Token != want.Token {
				t.Errorf("Slice(%d, %d): token %s, want %s", lo, hi, got.Token, want.Token)
			}
			if g, w := render(got), render(want); g != w {
				t.Errorf("Slice(%d, %d) rows:\n%s\nwant\n%s", lo, hi, g, w)
			}
			// A slice of a slice is the same responses again.
			if hi-lo >= 2 {
				inner := got.Slice(1, hi-lo)
				sub := build(items[lo+1 : hi])
				if inner.Token != sub.Token || render(inner) != render(sub) {
					t.Errorf("Slice(%d, %d).Slice(1, %d) differs from its responses built alone", lo, hi, hi-lo)
				}
				inner.Release()
				sub.Release()
			}
			got.Release()
			want.Release()
		}
	}
}
