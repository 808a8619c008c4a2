package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var syncedAt = time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)

// testItems returns responses of two surveys over several days, in an order
// that interleaves partitions, plus a partial one and two deleted ones.
func testItems(version uint64) []flatten.Item {
	day := func(d int) *survey.Time { return survey.TimeOf(time.Date(2026, 3, d, 23, 59, 59, 0, time.UTC)) }
	var items []flatten.Item
	for i := 0; i < 12; i++ {
		sid := int64(4574)
		if i%3 == 2 {
			sid = 3177
		}
		r := &survey.Response{
			ResponseID:     survey.GUID(fmt.Sprintf("%08x-0000-4000-8000-00000000000%x", i, i%16)),
			SurveyID:       sid,
			SurveyName:     "Průzkum",
			IPAddress:      "192.0.2.1",
			DateCreated:    survey.Time{Time: day(1 + i%2).Add(-time.Hour)},
			DateCompleted:  day(1 + i%2),
			TotalTime:      survey.Int(3600),
			ResponseStatus: survey.StatusCompleted,
			URLParameters:  []survey.URLParameter{{Name: "src", Value: fmt.Sprint(i)}},
			Pages: []survey.Page{{ID: 1, Questions: []survey.Question{
				{ID: 10, Type: "single", Title: "Jak?", Answers: []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: survey.Str("Dobře"), Value: survey.Int(1)}}},
				{ID: 11, Type: "essay", Answers: []survey.Answer{{Text: survey.Str(strings.Repeat("ž", i))}}},
			}}},
		}
		switch i {
		case 5: // partial: partitioned by date_created
			r.ResponseStatus, r.DateCompleted, r.TotalTime = survey.StatusPartial, nil, nil
		case 7: // deleted in the detail: partitioned by synced_at
			r.ResponseStatus = survey.StatusDeleted
		}
		items = append(items, flatten.Item{Response: r, SurveyID: sid, ResponseID: r.ResponseID, Version: version, SyncedAt: syncedAt})
	}
	items = append(items, flatten.Item{SurveyID: 4574, ResponseID: survey.MustGUID("ffffffff-0000-4000-8000-000000000000"), Deleted: true, Version: version, SyncedAt: syncedAt})
	return items
}

func buildBatch(t *testing.T, mem memory.Allocator, items []flatten.Item) *flatten.Batch {
	t.Helper()
	b := flatten.NewBuilder(mem)
	defer b.Release()
	for _, it := range items {
		if err := b.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	return b.Flush()
}

// readTable reads every part file of a table and returns its rows rendered
// as JSON, sorted, after checking that each row lies in its file's
// partition and that the file carries the contract schema.
func readTable(t *testing.T, mem memory.Allocator, dir, table string, schema *arrow.Schema) []string {
	t.Helper()
	var rows []string
	paths, err := filepath.Glob(filepath.Join(dir, table, "survey_id=*", "date=*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		pf, err := file.OpenParquetFile(path, false)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		pf.Close()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !sameSchema(tbl.Schema(), schema) {
			t.Errorf("%s: schema\n%s\nwant\n%s", path, tbl.Schema(), schema)
		}
		rel, _ := filepath.Rel(filepath.Join(dir, table), filepath.Dir(path))
		tr := array.NewTableReader(tbl, 1000)
		for tr.Next() {
			rec := tr.RecordBatch()
			for i := 0; i < int(rec.NumRows()); i++ {
				row := renderRow(rec, i)
				rows = append(rows, row)
				var m map[string]any
				json.Unmarshal([]byte(row), &m)
				if want := wantPartition(table, m); rel != want {
					t.Errorf("%s: row %s belongs in %s", path, row, want)
				}
			}
		}
		tr.Release()
		tbl.Release()
	}
	slices.Sort(rows)
	return rows
}

// sameSchema compares names, nullability and types, ignoring field
// metadata and the names of list elements, which Parquet does not keep.
func sameSchema(got, want *arrow.Schema) bool {
	if got.NumFields() != want.NumFields() {
		return false
	}
	for i, g := range got.Fields() {
		w := want.Field(i)
		gt, wt := g.Type, w.Type
		if gl, ok := gt.(*arrow.ListType); ok {
			wl, ok := wt.(*arrow.ListType)
			if !ok {
				return false
			}
			gt, wt = gl.Elem(), wl.Elem()
		}
		if g.Name != w.Name || g.Nullable != w.Nullable || !arrow.TypeEqual(gt, wt) {
			return false
		}
	}
	return true
}

// wantPartition is the partition rule, restated for the test's rows (each
// answers row here has a date_completed unless its response is partial).
func wantPartition(table string, m map[string]any) string {
	day := func(s any) string { return s.(string)[:10] }
	var d string
	switch {
	case table == flatten.TableResponses && m["is_deleted"].(float64) == 1:
		d = day(m["synced_at"])
	case m["date_completed"] != nil:
		d = day(m["date_completed"])
	case table == flatten.TableResponses:
		d = day(m["date_created"])
	default:
		d = "2026-03-02" // answers of the partial response (i=5): its date_created day
	}
	return fmt.Sprintf("survey_id=%.0f/date=%s", m["survey_id"], d)
}

func recordRows(rec arrow.RecordBatch) []string {
	var rows []string
	for i := 0; i < int(rec.NumRows()); i++ {
		rows = append(rows, renderRow(rec, i))
	}
	slices.Sort(rows)
	return rows
}

func renderRow(rec arrow.RecordBatch, row int) string {
	m := map[string]any{}
	for c, col := range rec.Columns() {
		var v any
		if !col.IsNull(row) {
			switch a := col.(type) {
			case *array.Timestamp:
				v = a.Value(row).ToTime(arrow.Millisecond).UTC().Format(time.RFC3339Nano)
			case *array.List:
				start, end := a.ValueOffsets(row)
				vals := a.ListValues().(*array.String)
				s := []string{}
				for j := start; j < end; j++ {
					s = append(s, vals.Value(int(j)))
				}
				v = s
			default:
				v = col.GetOneForMarshal(row)
			}
		}
		m[rec.ColumnName(c)] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func parquetFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() && strings.HasSuffix(path, ".parquet") {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && atomicfile.IsTemp(d.Name()) {
			out = append(out, path)
		}
		return nil
	})
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, codec := range []string{"", "snappy", "none"} {
		t.Run("codec="+codec, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, Compression: codec, Allocator: mem})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()

			b1 := buildBatch(t, mem, testItems(1))
			defer b1.Release()
			b2 := buildBatch(t, mem, testItems(2)[:4]) // a later version of some responses
			defer b2.Release()
			for _, b := range []*flatten.Batch{b1, b2} {
				if err := s.Write(ctx, b); err != nil {
					t.Fatal(err)
				}
			}

			wantResp := append(recordRows(b1.Responses), recordRows(b2.Responses)...)
			wantAns := append(recordRows(b1.Answers), recordRows(b2.Answers)...)
			slices.Sort(wantResp)
			slices.Sort(wantAns)
			gotResp := readTable(t, mem, dir, flatten.TableResponses, flatten.ResponsesSchema)
			gotAns := readTable(t, mem, dir, flatten.TableAnswers, flatten.AnswersSchema)
			if diff := cmp.Diff(wantResp, gotResp); diff != "" {
				t.Errorf("responses rows (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantAns, gotAns); diff != "" {
				t.Errorf("answers rows (-want +got):\n%s", diff)
			}

			files := parquetFiles(t, dir)
			for _, want := range []string{
				"responses/survey_id=4574/date=2026-03-01/part-" + b1.Token + ".parquet",
				"responses/survey_id=4574/date=2026-03-02/part-" + b1.Token + ".parquet",
				"responses/survey_id=3177/date=2026-03-01/part-" + b1.Token + ".parquet",
				"responses/survey_id=4574/date=2026-11-22/part-" + b1.Token + ".parquet", // deleted
				"answers/survey_id=4574/date=2026-03-01/part-" + b1.Token + ".parquet",
				"answers/survey_id=4574/date=2026-03-01/part-" + b2.Token + ".parquet",
			} {
				if !slices.Contains(files, want) {
					t.Errorf("missing %s in %v", want, files)
				}
			}
			if tmp := tempFiles(t, dir); len(tmp) > 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

func TestRetryReplacesFiles(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := buildBatch(t, mem, testItems(1))
	defer b.Release()
	ctx := context.Background()
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	before := parquetFiles(t, dir)
	// The same content built again has the same token: a retry after a
	// crash or an error replaces the files.
	again := buildBatch(t, mem, testItems(1))
	defer again.Release()
	if again.Token != b.Token {
		t.Fatalf("tokens differ for equal content: %s %s", again.Token, b.Token)
	}
	for range 2 {
		if err := s.Write(ctx, again); err != nil {
			t.Fatal(err)
		}
	}
	if after := parquetFiles(t, dir); !slices.Equal(before, after) {
		t.Fatalf("files after retries %v, want %v", after, before)
	}
	if got, want := len(readTable(t, mem, dir, flatten.TableAnswers, flatten.AnswersSchema)), int(b.Answers.NumRows()); got != want {
		t.Fatalf("answers rows after retries: %d, want %d", got, want)
	}
}

func TestNoPartialFileVisible(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	b := buildBatch(t, mem, testItems(1))
	defer b.Release()

	// A failure after the data is written but before the rename: nothing
	// is visible and nothing is left behind.
	boom := errors.New("disk on fire")
	s.testHookBeforeRename = func(tmp string) error {
		if !atomicfile.IsTemp(filepath.Base(tmp)) || strings.HasSuffix(tmp, ".parquet") {
			t.Errorf("temporary name %s would be visible to readers", tmp)
		}
		return boom
	}
	if err := s.Write(context.Background(), b); !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want %v", err, boom)
	}
	if f := parquetFiles(t, dir); len(f) > 0 {
		t.Fatalf("files visible after a failed write: %v", f)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}

	// Responses are written after answers: fail on the first responses
	// file and check that answers made it while no responses row did.
	s.testHookBeforeRename = func(tmp string) error {
		if strings.Contains(tmp, string(filepath.Separator)+flatten.TableResponses+string(filepath.Separator)) {
			return boom
		}
		return nil
	}
	if err := s.Write(context.Background(), b); !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want %v", err, boom)
	}
	if n := len(readTable(t, mem, dir, flatten.TableResponses, flatten.ResponsesSchema)); n != 0 {
		t.Fatalf("%d responses rows visible after their write failed", n)
	}

	// A crash leaves a temporary file: readers' globs skip it, Open removes it.
	part := filepath.Join(dir, "answers", "survey_id=4574", "date=2026-03-01")
	leftover := filepath.Join(part, ".part-"+b.Token+".parquet-123.tmp")
	if err := os.WriteFile(leftover, []byte("PAR1 half a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "answers", "*", "*", "*.parquet")); slices.Contains(m, leftover) {
		t.Fatal("glob *.parquet matches a temporary file")
	}
	// Other stores under the same folder (the default files store) keep
	// their temporary files.
	foreign := filepath.Join(dir, "files", ".upload-1.tmp")
	if err := os.MkdirAll(filepath.Dir(foreign), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(foreign, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open left %s: %v", leftover, err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("Open touched %s outside its folders: %v", foreign, err)
	}
	// The retry completes the batch.
	if err := s2.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if n := len(readTable(t, mem, dir, flatten.TableResponses, flatten.ResponsesSchema)); n != int(b.Responses.NumRows()) {
		t.Fatalf("%d responses rows after the retry, want %d", n, b.Responses.NumRows())
	}
}

func TestWriteErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	if _, err := Open(Options{}); err == nil {
		t.Error("Open without dir succeeded")
	}
	if _, err := Open(Options{Dir: t.TempDir(), Compression: "brotli-ish"}); err == nil {
		t.Error("Open with an unknown compression succeeded")
	}
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	b := buildBatch(t, mem, testItems(1))
	defer b.Release()

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Write(ctx, b); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context: %v", err)
	}
	bad := *b
	bad.Token = "../../etc"
	if err := s.Write(context.Background(), &bad); err == nil {
		t.Error("Write accepted a token that is a path")
	}
	empty := buildBatch(t, mem, nil)
	defer empty.Release()
	if err := s.Write(context.Background(), empty); err != nil {
		t.Errorf("Write of an empty batch: %v", err)
	}
	if f := parquetFiles(t, dir); len(f) > 0 {
		t.Errorf("files after failed and empty writes: %v", f)
	}
	s.Close()
	if err := s.Write(context.Background(), b); err == nil {
		t.Error("Write after Close succeeded")
	}
	if _, err := s.LoadStates(context.Background()); err == nil {
		t.Error("LoadStates after Close succeeded")
	}
}

func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadStates(ctx); err != nil || len(st) != 0 {
		t.Fatalf("LoadStates on a fresh dir: %v, %v", st, err)
	}
	if sv, err := s.LoadSurveys(ctx); err != nil || len(sv) != 0 {
		t.Fatalf("LoadSurveys on a fresh dir: %v, %v", sv, err)
	}

	t0 := time.Date(2026, 11, 22, 4, 0, 0, 123456789, time.UTC)
	a := pipeline.StreamState{SurveyID: 2, Stream: pipeline.StreamCompleted, Watermark: t0, LastRunAt: t0, Synced: 10, UpdatedAt: t0}
	b := pipeline.StreamState{SurveyID: 1, Stream: pipeline.StreamPartial, Watermark: t0.Add(-time.Hour), LastRunAt: t0, LastError: "HTTP 503: try again", Synced: 3, UpdatedAt: t0}
	if err := s.SaveStates(ctx, []pipeline.StreamState{a, b}); err != nil {
		t.Fatal(err)
	}
	a2 := a
	a2.Watermark, a2.Synced = t0.Add(time.Minute), 20
	if err := s.SaveStates(ctx, []pipeline.StreamState{a2}); err != nil {
		t.Fatal(err)
	}
	launched := t0.Add(-24 * time.Hour)
	sv1 := pipeline.SurveyInfo{SurveyID: 4574, Name: "Spokojenost zákazníků", LaunchedAt: &launched, FirstSeen: t0, LastSeen: t0}
	sv2 := pipeline.SurveyInfo{SurveyID: 3177, Name: "Průzkum", FirstSeen: t0, LastSeen: t0}
	if err := s.SaveSurveys(ctx, []pipeline.SurveyInfo{sv1, sv2}); err != nil {
		t.Fatal(err)
	}
	sv1b := sv1
	ended := t0
	sv1b.EndedAt, sv1b.LastSeen = &ended, t0.Add(time.Hour)
	if err := s.SaveSurveys(ctx, []pipeline.SurveyInfo{sv1b}); err != nil {
		t.Fatal(err)
	}

	// A save that fails before its rename leaves the old content.
	s.testHookBeforeRename = func(string) error { return errors.New("power cut") }
	if err := s.SaveStates(ctx, []pipeline.StreamState{{SurveyID: 9, Stream: "x"}}); err == nil {
		t.Fatal("SaveStates succeeded despite the failure")
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	s.Close()

	// A crash mid-save leaves a temporary file; it is ignored and removed.
	if err := os.WriteFile(filepath.Join(dir, "_state", ".sync_state.json-1.tmp"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	states, err := s2.LoadStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pipeline.StreamState{b, a2}, states); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
	surveys, err := s2.LoadSurveys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pipeline.SurveyInfo{sv2, sv1b}, surveys); diff != "" {
		t.Errorf("surveys (-want +got):\n%s", diff)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Fatalf("Open left temporary files: %v", tmp)
	}
	// A damaged state file is moved aside and the state rebuilt (issue 22:
	// an error here made every start fail); TestDamagedStateFileIsMovedAside.
	if err := os.WriteFile(filepath.Join(dir, "_state", statesFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := s2.LoadStates(ctx); err != nil || len(st) != 0 {
		t.Errorf("LoadStates of a damaged file: %v, %v; want it moved aside and no states", st, err)
	}
}

// The sink satisfies the pipeline's interfaces.
var (
	_ pipeline.Sink        = (*Sink)(nil)
	_ pipeline.StateStore  = (*Sink)(nil)
	_ pipeline.SurveyStore = (*Sink)(nil)
)

// BenchmarkWrite measures flatten + Write of batches of 5,000 responses of
// 45 answer cells each, all completed on one day of one survey (the common
// backfill shape), with zstd.
func BenchmarkWrite(b *testing.B) {
	const perBatch = 5000
	dir := b.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	items := benchItems(perBatch)
	bld := flatten.NewBuilder(memory.DefaultAllocator)
	defer bld.Release()
	ctx := context.Background()
	var answers int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range items {
			items[j].Version = uint64(i*perBatch + j + 1)
			if err := bld.Add(items[j]); err != nil {
				b.Fatal(err)
			}
		}
		batch := bld.Flush()
		if err := s.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
		_, a := batch.Rows()
		answers += a
		batch.Release()
	}
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*perBatch)/sec, "responses/s")
	b.ReportMetric(float64(answers)/sec, "answers/s")
	var size int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	b.ReportMetric(float64(size)/float64(b.N*perBatch), "file-bytes/response")
}

func benchItems(n int) []flatten.Item {
	done := survey.TimeOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	out := make([]flatten.Item, n)
	for i := range out {
		r := &survey.Response{
			ResponseID:     survey.GUID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)),
			SurveyID:       4574,
			SurveyName:     "Spokojenost zákazníků 2026",
			IPAddress:      fmt.Sprintf("192.0.2.%d", i%256),
			DateCreated:    survey.Time{Time: done.Add(-time.Duration(i) * time.Second)},
			DateCompleted:  survey.TimeOf(done.Add(time.Duration(i) * time.Second)),
			TotalTime:      survey.Int(int64(600 + i%300)),
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
					qq.Answers = []survey.Answer{{ChoiceID: survey.Int(int64(i % 5)), ChoiceLabel: survey.Str("Spokojen"), Value: survey.Int(int64(i % 5))}}
				case 2:
					qq.Type = "multiple"
					for c := 0; c < 3; c++ {
						qq.Answers = append(qq.Answers, survey.Answer{ChoiceID: survey.Int(int64(c)), ChoiceLabel: survey.Str("Možnost"), Value: survey.Int(int64(c))})
					}
				case 3:
					qq.Type = "matrix"
					for row := 0; row < 3; row++ {
						qq.Answers = append(qq.Answers, survey.Answer{RowID: survey.Int(int64(row)), RowLabel: survey.Str("Cena"), ColumnID: survey.Int(int64((i + row) % 4)), ColumnLabel: survey.Str("Dobrá"), Value: survey.Int(2)})
					}
				case 4:
					qq.Type = "essay"
					qq.Answers = []survey.Answer{{Text: survey.Str(fmt.Sprintf("Příliš žluťoučký kůň úpěl ďábelské ódy %d.", i))}}
				case 5:
					qq.Type = "url_parameter"
					qq.Answers = []survey.Answer{{Text: survey.Str("newsletter")}}
				}
				page.Questions = append(page.Questions, qq)
			}
			r.Pages = append(r.Pages, page)
		}
		out[i] = flatten.Item{Response: r, SurveyID: r.SurveyID, ResponseID: r.ResponseID, SyncedAt: done.Time}
	}
	return out
}

func TestConcurrentUse(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Allocator: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// Versions 1 and 2 twice each: concurrent writes of one batch must
	// still leave one file per partition.
	var batches []*flatten.Batch
	for _, v := range []uint64{1, 2, 1, 2} {
		b := buildBatch(t, mem, testItems(v))
		defer b.Release()
		batches = append(batches, b)
	}
	errs := make(chan error, len(batches)+2)
	for _, b := range batches {
		go func() { errs <- s.Write(ctx, b) }()
	}
	for i := range 2 {
		go func() {
			errs <- s.SaveStates(ctx, []pipeline.StreamState{{SurveyID: int64(i), Stream: pipeline.StreamCompleted, Synced: 1}})
		}()
	}
	for range len(batches) + 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got, want := len(readTable(t, mem, dir, flatten.TableResponses, flatten.ResponsesSchema)), 2*int(batches[0].Responses.NumRows()); got != want {
		t.Errorf("responses rows %d, want %d", got, want)
	}
	if tmp := tempFiles(t, dir); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	states, err := s.LoadStates(ctx)
	if err != nil || len(states) != 2 {
		t.Errorf("states after concurrent saves: %v, %v", states, err)
	}
}
