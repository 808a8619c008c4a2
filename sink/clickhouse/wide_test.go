package clickhouse

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/wide"
)

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"spokojenost":                "spokojenost",
		"Zlepšení":                   "zlepseni",
		"Spokojenost s úrovní (%)":   "spokojenost_s_urovni",
		"ŽLUŤOUČKÝ kůň":              "zlutoucky_kun",
		"1. otázka":                  "q_1_otazka",
		"  --  ":                     "",
		"Straße":                     "strasse",
		"Q1_nps":                     "q1_nps",
		strings.Repeat("dlouhé", 20): strings.TrimRight(strings.Repeat("dlouhe", 10), "_"),
	} {
		if got := wide.SanitizeName(in); got != want {
			t.Errorf("wide.SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAssignNamesStableAndUnique(t *testing.T) {
	taken := []WideColumn{{QuestionID: 1, Variable: "zlepseni", Name: "zlepseni"}}
	fresh := []WideColumn{
		{QuestionID: 2, Variable: "Zlepšení"},        // sanitises to a taken name
		{QuestionID: 3, Variable: "response_status"}, // a response column's name
		{QuestionID: 4, Variable: "hodnoceni", RowID: 7, RowLabel: "Cena"},
		{QuestionID: 4, Variable: "hodnoceni", RowID: 8, RowLabel: ""},
		{QuestionID: 5, Variable: "zdroj", Part: "other"},
		{QuestionID: 6, Variable: ""},
	}
	wide.AssignNames(taken, fresh)
	var got []string
	for _, c := range fresh {
		got = append(got, c.Name)
	}
	want := []string{"zlepseni_2", "response_status_3", "hodnoceni_cena", "hodnoceni_r8", "zdroj_other", "q6"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}

// TestWideViewMatchesEmulator writes the emulator's responses (every
// question kind, uploads, Czech labels) through Write and compares survey
// 4574's wide view with a pivot computed here from the emulator's
// responses; then a response with a question the survey did not have
// (whose variable sanitises to an existing column's name) arrives, a
// response gets a new version and one is deleted, and the view follows
// without anything but Write.
func TestWideViewMatchesEmulator(t *testing.T) {
	// With the choice ids and a friendly name (the other tests run without).
	s, _ := openTest(t, func(o *Options) {
		o.Wide = WideOptions{ChoiceIDs: true, Names: map[int64]string{4574: "spokojenost_2026"}}
	})
	ctx := ctxT(t)
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	em, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: 150, Seed: 1, Files: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	truth := map[string]survey.Response{} // current responses by lower-case id
	version := uint64(0)
	write := func(rs []survey.Response, deleted ...string) {
		t.Helper()
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		b := flatten.NewBuilder(mem)
		defer b.Release()
		for _, r := range rs {
			version++
			if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: version, SyncedAt: now}); err != nil {
				t.Fatal(err)
			}
			if r.ResponseStatus == survey.StatusDeleted {
				delete(truth, strings.ToLower(string(r.ResponseID)))
			} else {
				truth[strings.ToLower(string(r.ResponseID))] = r
			}
		}
		for _, id := range deleted {
			version++
			if err := b.Add(flatten.Item{SurveyID: 4574, ResponseID: survey.GUID(id), Deleted: true, Version: version, SyncedAt: now}); err != nil {
				t.Fatal(err)
			}
			delete(truth, id)
		}
		batch := b.Flush()
		defer batch.Release()
		if err := s.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	var all []survey.Response
	for r := range em.Responses(4574) {
		all = append(all, r)
	}
	write(all[:len(all)/2])
	write(all[len(all)/2:])
	compareWide(t, s, truth)

	cols, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range cols {
		names[c.Name] = true
	}
	for _, n := range []string{"source", "spokojenost", "spokojenost_id", "hodnoceni_cena_id", "zdroj", "zdroj_other", "produkty", "produkty_other", "hodnoceni_cena",
		"hodnoceni_zakaznicka_podpora", "kanaly_bezny_ucet", "nps", "zlepseni", "prilohy"} {
		if !names[n] {
			t.Errorf("no column %s in %v", n, cols)
		}
	}

	// A question added to the running survey, whose variable sanitises to
	// "zlepseni" (taken by the open question), with Czech labels.
	r, err := em.AddResponse(4574, survey.Response{ResponseStatus: survey.StatusCompleted})
	if err != nil {
		t.Fatal(err)
	}
	label := "Ďábelsky dobré – ano"
	r.Pages = append(r.Pages, survey.Page{ID: 99, Questions: []survey.Question{{
		ID: 424242, Type: "single", Title: "Zlepšení (nová otázka)", Variable: "Zlepšení",
		Answers: []survey.Answer{{ChoiceID: survey.Int(7), ChoiceLabel: &label}},
	}}})
	// A new version of a response: another satisfaction label.
	changed := all[3]
	for p := range changed.Pages {
		for q := range changed.Pages[p].Questions {
			if changed.Pages[p].Questions[q].Variable == "spokojenost" {
				other := "Úplně jinak"
				changed.Pages[p].Questions[q].Answers = []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: &other}}
			}
		}
	}
	write([]survey.Response{r, changed}, strings.ToLower(string(all[5].ResponseID)))
	compareWide(t, s, truth)
	if cols, err = s.WideColumns(ctx, 4574); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range cols {
		if c.QuestionID == 424242 && c.Part == "" {
			found = true
			if c.Name != "zlepseni_424242" || c.Title != "Zlepšení (nová otázka)" || c.Kind != KindLabel {
				t.Errorf("new question's column: %+v", c)
			}
		}
	}
	if !found {
		t.Error("the new question has no column")
	}

	// The friendly name is the same view.
	sameView := func() {
		t.Helper()
		var a, b []string
		for _, v := range []struct {
			name string
			out  *[]string
		}{{WideViewName(4574), &a}, {"spokojenost_2026", &b}} {
			var cols string
			var n uint64
			if err := s.Conn().QueryRow(ctx, "SELECT arrayStringConcat(groupArray(name), ',') FROM system.columns WHERE database = ? AND table = ?",
				s.Database(), v.name).Scan(&cols); err != nil {
				t.Fatal(err)
			}
			if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.table(v.name)+" WHERE zlepseni_424242_id = 7").Scan(&n); err != nil {
				t.Fatal(err)
			}
			*v.out = []string{cols, strconv.FormatUint(n, 10)}
		}
		if !reflect.DeepEqual(a, b) || b[1] != "1" {
			t.Errorf("survey_4574 %v, spokojenost_2026 %v", a, b)
		}
	}
	sameView()

	// The view's filters give the same rows with and without predicate
	// pushdown (a filter must never reach an older version).
	view := s.table(WideViewName(4574))
	for _, where := range []string{
		"response_status = 'completed'",
		"spokojenost = 'Úplně jinak'",
		"response_id = toUUID('" + strings.ToLower(string(all[3].ResponseID)) + "')",
		"response_id = toUUID('" + strings.ToLower(string(all[5].ResponseID)) + "')",
	} {
		var counts []uint64
		for _, on := range []int{0, 1} {
			var n uint64
			q := fmt.Sprintf("SELECT count() FROM (SELECT * FROM %s WHERE %s)", view, where)
			if err := s.Conn().QueryRow(ch.Context(ctx, ch.WithSettings(ch.Settings{"enable_optimize_predicate_expression": on})), q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			counts = append(counts, n)
		}
		if counts[0] != counts[1] {
			t.Errorf("WHERE %s: %d rows without pushdown, %d with", where, counts[0], counts[1])
		}
	}

	// Refreshing by hand (surveysync views --refresh) changes nothing.
	if _, err := s.RefreshWideViews(ctx, 4574); err != nil {
		t.Fatal(err)
	}
	compareWide(t, s, truth)
	// --since: every response was read at now.
	for since, wantN := range map[time.Time]int{now: len(truth), now.Add(time.Second): 0} {
		if n, err := s.ExportWideCSV(ctx, io.Discard, 4574, ExportOptions{Since: since}); err != nil || n != wantN {
			t.Errorf("export since %s: %d records (%v), want %d", since, n, err, wantN)
		}
	}
	// The long tables: as many rows as the *_current views, every
	// current response once.
	for _, table := range []string{"responses", "answers"} {
		var want uint64
		if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.table(table+"_current")+" WHERE survey_id = 4574").Scan(&want); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := s.ExportTable(ctx, table, 4574, ExportOptions{}, func(fields []wide.Field) (wide.Writer, error) {
			return wide.NewCSV(&buf, fields, false)
		})
		if err != nil || uint64(n) != want || (table == "responses" && n != len(truth)) {
			t.Errorf("ExportTable %s: %d rows (%v), want %d", table, n, err, want)
		}
	}
	vs, err := s.WideViews(ctx)
	if err != nil || len(vs) != 1 || vs[0].SurveyID != 4574 || len(vs[0].Columns) != len(cols) || vs[0].View != view {
		t.Errorf("WideViews: %v %+v", err, vs)
	}

	// Every node has the view (ON CLUSTER), with every column, the same
	// rows, and no leftover of the swap.
	eachNode(t, func(addr string, c driver.Conn) {
		var n, rows, left uint64
		if err := c.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ?",
			s.Database(), WideViewName(4574)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, "SELECT count() FROM "+view).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND (endsWith(name, '__new') OR endsWith(name, '__old'))",
			s.Database()).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if n != uint64(len(wideResponseColumns)+len(cols)) || rows != uint64(len(truth)) || left != 0 {
			t.Errorf("node %s: view has %d columns (want %d), %d rows (want %d); %d leftover tables",
				addr, n, len(wideResponseColumns)+len(cols), rows, len(truth), left)
		}
	})
}

// compareWide checks survey 4574's wide view against a pivot of truth made
// here: one row per response, each column as the question's kind says.
func compareWide(t *testing.T, s *Sink, truth map[string]survey.Response) {
	t.Helper()
	ctx := ctxT(t)
	cols, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		q, row int64
		part   string
	}
	name := map[key]string{}
	for _, c := range cols {
		name[key{c.QuestionID, c.RowID, c.Part}] = c.Name
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	list := func(vs []string) string { return "[" + strings.Join(vs, "|") + "]" }
	want := map[string]map[string]string{}
	for id, r := range truth {
		row := map[string]string{"response_status": r.ResponseStatus}
		for _, c := range cols {
			switch {
			case c.Kind == KindNumber || c.Kind == KindChoiceID:
				row[c.Name] = "NULL"
			case wide.IsArray(c.Kind):
				row[c.Name] = "[]"
			default:
				row[c.Name] = ""
			}
		}
		for _, p := range r.Pages {
			for _, q := range p.Questions {
				cells := map[int64][]string{}
				ids := map[int64]string{} // the first cell's choice (else matrix column) id
				for _, a := range q.Answers {
					var rowID int64
					if a.RowID != nil {
						rowID = int64(*a.RowID)
					}
					if _, ok := ids[rowID]; !ok {
						switch {
						case a.ChoiceID != nil:
							ids[rowID] = strconv.FormatInt(int64(*a.ChoiceID), 10)
						case a.ColumnID != nil:
							ids[rowID] = strconv.FormatInt(int64(*a.ColumnID), 10)
						default:
							ids[rowID] = "NULL"
						}
					}
					switch q.Type {
					case "single", "matrix_single":
						cells[rowID] = append(cells[rowID], str(a.ChoiceLabel)+str(a.ColumnLabel))
					case "multiple", "matrix_multiple":
						cells[rowID] = append(cells[rowID], str(a.ChoiceLabel)+str(a.ColumnLabel))
					case "scale":
						cells[rowID] = append(cells[rowID], strconv.FormatInt(int64(*a.Value), 10))
					case "file_upload":
						if a.Text != nil {
							cells[rowID] = append(cells[rowID], *a.Text)
						} else {
							cells[rowID] = append(cells[rowID], strings.ToLower(string(*a.FileID)))
						}
					default: // essay, url_parameter
						cells[rowID] = append(cells[rowID], str(a.Text))
					}
					if a.OtherID != nil {
						row[name[key{q.ID, 0, "other"}]] = str(a.Text)
					}
				}
				for rowID, vs := range cells {
					n, ok := name[key{q.ID, rowID, ""}]
					if !ok {
						t.Errorf("no column for question %d row %d (%s)", q.ID, rowID, q.Variable)
						continue
					}
					switch q.Type {
					case "multiple", "matrix_multiple", "file_upload":
						row[n] = list(vs)
					default:
						row[n] = vs[0]
					}
					if n, ok := name[key{q.ID, rowID, "id"}]; ok {
						row[n] = ids[rowID]
					}
				}
			}
		}
		want[id] = row
	}

	compareCSV(t, s, want)
	compareParquet(t, s, want)

	rows, err := s.Conn().Query(ctx, "SELECT * FROM "+s.table(WideViewName(4574)))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	got := map[string]map[string]string{}
	for rows.Next() {
		vals := make([]any, len(types))
		for i, ct := range types {
			vals[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		var id string
		for i, ct := range types {
			v := reflect.ValueOf(vals[i]).Elem()
			var out string
			switch {
			case v.Kind() == reflect.Pointer && v.IsNil():
				out = "NULL"
			case v.Kind() == reflect.Pointer:
				out = fmt.Sprint(v.Elem().Interface())
			case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
				out = list(v.Interface().([]string))
			default:
				out = fmt.Sprint(v.Interface())
			}
			if ct.Name() == "response_id" {
				id = out
			}
			row[ct.Name()] = out
		}
		got[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("wide view has %d rows, want %d", len(got), len(want))
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	bad := 0
	for _, id := range ids {
		g, ok := got[id]
		if !ok {
			t.Errorf("response %s missing from the wide view", id)
			continue
		}
		for col, w := range want[id] {
			if g[col] != w && bad < 20 {
				bad++
				t.Errorf("response %s column %s = %q, want %q", id, col, g[col], w)
			}
		}
	}
	t.Logf("wide view: %d rows × %d columns compared", len(got), len(types))
}

// writeEmulatorResponses writes n responses of the emulator's survey 4574
// (uploads included) through Write.
func writeEmulatorResponses(t *testing.T, s *Sink, n int) {
	t.Helper()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	em, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: n, Seed: 1, Files: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := flatten.NewBuilder(mem)
	defer b.Release()
	v := uint64(time.Now().UnixNano())
	for r := range em.Responses(4574) {
		v++
		if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: v, SyncedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := s.Write(ctxT(t), batch); err != nil {
		t.Fatal(err)
	}
}

// TestWideViewOfAnOlderWarehouse: a survey whose answers were written
// before wide views existed (no wide_columns rows, no view) gets a view
// with every answered question at the first write of a new daemon.
func TestWideViewOfAnOlderWarehouse(t *testing.T) {
	skipOnCluster(t) // TRUNCATE stands for the older warehouse
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeEmulatorResponses(t, s, 30)
	want, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"TRUNCATE TABLE " + s.table("wide_columns"), "DROP TABLE " + s.table(WideViewName(4574))} {
		if err := s.Conn().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(ctx, testOptions(s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	writeBatch(t, s2, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 1}})
	got, err := s2.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want)+1 { // + q0 of the hand-made response
		t.Fatalf("%d columns after the first write, want %d", len(got), len(want)+1)
	}
	var n uint64
	if err := s2.Conn().QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ?",
		s.Database(), WideViewName(4574)).Scan(&n); err != nil || n != uint64(len(wideResponseColumns)+len(got)) {
		t.Errorf("view has %d columns (%v), want %d", n, err, len(wideResponseColumns)+len(got))
	}
}

// compareCSV checks the CSV export of survey 4574 against want (the pivot
// of compareWide, in its canonical form: arrays "[a|b]", NULL "NULL").
func compareCSV(t *testing.T, s *Sink, want map[string]map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.ExportWideCSV(ctxT(t), &buf, 4574, ExportOptions{BOM: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(buf.Bytes(), []byte("\ufeff")) {
		t.Error("no BOM")
	}
	recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(buf.Bytes(), []byte("\ufeff")))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) || len(recs) != len(want)+1 {
		t.Fatalf("export: %d records (%d lines), want %d", n, len(recs), len(want))
	}
	header := recs[0]
	bad := 0
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, v := range rec {
			row[header[i]] = v
		}
		w, ok := want[row["response_id"]]
		if !ok {
			t.Errorf("export: response %s is not current", row["response_id"])
			continue
		}
		for col, wv := range w {
			gv := row[col]
			switch {
			case wv == "NULL":
				wv = ""
			case strings.HasPrefix(wv, "[") && strings.HasSuffix(wv, "]"):
				var vs []string
				if err := json.Unmarshal([]byte(gv), &vs); err != nil {
					t.Errorf("export: %s of %s: %q is not a JSON array", col, row["response_id"], gv)
					continue
				}
				gv = "[" + strings.Join(vs, "|") + "]"
			}
			if gv != wv && bad < 20 {
				bad++
				t.Errorf("export: response %s column %s = %q, want %q", row["response_id"], col, gv, wv)
			}
		}
	}
}

// TestWideViewKeptAcrossRestart: a new daemon (Sink) whose first write
// brings nothing new leaves the view as it is (no DDL per survey at every
// start).
func TestWideViewKeptAcrossRestart(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 3}})
	created := func() (m time.Time) {
		t.Helper()
		if err := s.Conn().QueryRow(ctx, "SELECT metadata_modification_time FROM system.tables WHERE database = ? AND name = ?",
			s.Database(), WideViewName(4574)).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := created()
	time.Sleep(1100 * time.Millisecond)
	s2, err := Open(ctx, testOptions(s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	writeBatch(t, s2, []testResponse{{ID: guid(2), SurveyID: 4574, Version: 2, Answers: 3}})
	if after := created(); !after.Equal(before) {
		t.Errorf("view re-created at %s (was %s) though nothing changed", after, before)
	}
	writeBatch(t, s2, []testResponse{{ID: guid(3), SurveyID: 4574, Version: 3, Answers: 4}}) // q3 is new
	if after := created(); after.Equal(before) {
		t.Error("view not replaced for a new question")
	}
}

// compareParquet checks the Parquet export of survey 4574 against want.
func compareParquet(t *testing.T, s *Sink, want map[string]map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.ExportWideParquet(ctxT(t), &buf, 4574, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if n != len(want) || int(tbl.NumRows()) != len(want) {
		t.Fatalf("parquet export: %d rows (table %d), want %d", n, tbl.NumRows(), len(want))
	}
	tr := array.NewTableReader(tbl, 1000)
	defer tr.Release()
	bad := 0
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]string{}
			for c, f := range rec.Schema().Fields() {
				col := rec.Column(c)
				var v string
				switch a := col.(type) {
				case *array.String:
					v = a.Value(i)
				case *array.Int64:
					v = "NULL"
					if a.IsValid(i) {
						v = strconv.FormatInt(a.Value(i), 10)
					}
				case *array.List:
					start, end := a.ValueOffsets(i)
					vs := []string{}
					for k := start; k < end; k++ {
						vs = append(vs, a.ListValues().(*array.String).Value(int(k)))
					}
					v = "[" + strings.Join(vs, "|") + "]"
				default:
					continue
				}
				row[f.Name] = v
			}
			w, ok := want[row["response_id"]]
			if !ok {
				t.Errorf("parquet export: response %s is not current", row["response_id"])
				continue
			}
			for col, wv := range w {
				if row[col] != wv && bad < 20 {
					bad++
					t.Errorf("parquet export: response %s column %s = %q, want %q", row["response_id"], col, row[col], wv)
				}
			}
		}
	}
}

// Choice ids turned on for a survey whose columns were recorded without
// them: the daemon's first write adds them and replaces the view; turned
// off again, the view drops them (they stay recorded, their names taken).
func TestWideViewChoiceIDsTurnedOn(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 2}})
	columns := func() string {
		t.Helper()
		var cols string
		if err := s.Conn().QueryRow(ctx, "SELECT arrayStringConcat(groupArray(name), ',') FROM system.columns WHERE database = ? AND table = ? AND name LIKE 'q%'",
			s.Database(), WideViewName(4574)).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		return cols
	}
	before := columns()
	for _, on := range []bool{true, false} {
		o := testOptions(s.Database())
		o.Wide.ChoiceIDs = on
		s2, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		writeBatch(t, s2, []testResponse{{ID: guid(2), SurveyID: 4574, Version: 2, Answers: 2}})
		s2.Close()
		got := columns()
		if on && !strings.Contains(got, "_id") {
			t.Errorf("choice ids on: view columns %s (before %s)", got, before)
		}
		if !on && got != before {
			t.Errorf("choice ids off again: view columns %s, want %s", got, before)
		}
		t.Logf("choice ids %v: %s", on, got)
	}
}
