package warehousetest

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/wide"
)

// testExportWide writes the emulator's survey 4574 (every question kind,
// uploads, Czech labels) in two batches, then a response with a question
// the survey did not have whose variable sanitises to an existing column's
// name, a new version of a response and a deletion; it compares the wide
// export, as CSV and as Parquet, with a pivot of the emulator's responses
// made here, and checks since, the choice-id columns and the long tables.
func testExportWide(t *testing.T, s *suite) {
	wh := s.wh
	c := ctx(t)
	now := base
	em, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: surveyWide, Responses: 60, Seed: 1, Files: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	truth := map[string]survey.Response{} // current responses by lower-case id
	v := version(100)
	put := func(at time.Time, rs []survey.Response, deleted ...string) {
		t.Helper()
		b := flatten.NewBuilder(memory.NewGoAllocator())
		defer b.Release()
		for _, r := range rs {
			v++
			if err := b.Add(flatten.Item{Response: &r, SurveyID: surveyWide, ResponseID: r.ResponseID, Version: v, SyncedAt: at}); err != nil {
				t.Fatal(err)
			}
			truth[strings.ToLower(string(r.ResponseID))] = r
		}
		for _, id := range deleted {
			v++
			if err := b.Add(flatten.Item{SurveyID: surveyWide, ResponseID: survey.GUID(id), Deleted: true, Version: v, SyncedAt: at}); err != nil {
				t.Fatal(err)
			}
			delete(truth, id)
		}
		batch := b.Flush()
		defer batch.Release()
		if err := wh.Write(c, batch); err != nil {
			t.Fatal(err)
		}
	}
	var all []survey.Response
	for r := range em.Responses(surveyWide) {
		all = append(all, r)
	}
	put(now, all[:len(all)/2])
	put(now, all[len(all)/2:])

	// A new question (variable "Zlepšení" sanitises to "zlepseni", the open
	// question's), a new version of a response, a deletion: later.
	later := now.Add(time.Hour)
	r, err := em.AddResponse(surveyWide, survey.Response{ResponseStatus: survey.StatusCompleted})
	if err != nil {
		t.Fatal(err)
	}
	label := "Ďábelsky dobré – ano"
	r.Pages = append(r.Pages, survey.Page{ID: 99, Questions: []survey.Question{{
		ID: 424242, Type: "single", Title: "Zlepšení (nová otázka)", Variable: "Zlepšení",
		Answers: []survey.Answer{{ChoiceID: survey.Int(7), ChoiceLabel: &label}},
	}}})
	changed := all[3]
	changed.Pages = append([]survey.Page(nil), changed.Pages...)
	for p := range changed.Pages {
		qs := append([]survey.Question(nil), changed.Pages[p].Questions...)
		for q := range qs {
			if qs[q].Variable == "spokojenost" {
				other := "Úplně jinak"
				qs[q].Answers = []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: &other}}
			}
		}
		changed.Pages[p].Questions = qs
	}
	put(later, []survey.Response{r, changed}, strings.ToLower(string(all[5].ResponseID)))

	cols, err := wh.Exporter().WideColumns(c, surveyWide)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]wide.Column{}
	for _, c := range cols {
		names[c.Name] = c
	}
	for _, n := range []string{"source", "spokojenost", "spokojenost_id", "zdroj", "zdroj_other", "produkty", "produkty_other",
		"hodnoceni_cena", "hodnoceni_cena_id", "hodnoceni_zakaznicka_podpora", "kanaly_bezny_ucet", "nps", "zlepseni", "prilohy",
		"zlepseni_424242", "zlepseni_424242_id"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no column %s", n)
		}
	}
	if c := names["zlepseni_424242"]; c.QuestionID != 424242 || c.Kind != wide.KindLabel || c.Title != "Zlepšení (nová otázka)" {
		t.Errorf("the new question's column: %+v", c)
	}

	want := pivot(t, cols, truth)
	for _, format := range []string{"csv", "parquet"} {
		got := exportWide(t, wh, format, time.Time{})
		compareRows(t, format, got, want)
	}
	// since: only the two responses written later.
	got := exportWide(t, wh, "csv", later)
	if len(got) != 2 || got[strings.ToLower(string(changed.ResponseID))]["spokojenost"] != "Úplně jinak" {
		t.Errorf("since %s: %d rows %v", later, len(got), got)
	}
	if got := exportWide(t, wh, "csv", later.Add(time.Second)); len(got) != 0 {
		t.Errorf("since after the last write: %d rows", len(got))
	}

	// The long tables: every current response once, and exactly the
	// answers rows flatten makes of the current versions.
	wantAnswers := 0
	for _, r := range truth {
		b := flatten.NewBuilder(memory.NewGoAllocator())
		if err := b.Add(flatten.Item{Response: &r, SurveyID: surveyWide, ResponseID: r.ResponseID, Version: 1, SyncedAt: now}); err != nil {
			t.Fatal(err)
		}
		_, a := b.Rows()
		wantAnswers += a
		b.Release()
	}
	for table, want := range map[string]int{warehouse.ExportResponses: len(truth), warehouse.ExportAnswers: wantAnswers} {
		rows := exportCSV(t, wh, table, surveyWide, time.Time{})
		if len(rows) != want {
			t.Errorf("export %s: %d rows, want %d", table, len(rows), want)
		}
		for _, row := range rows {
			if _, ok := truth[row["response_id"]]; !ok {
				t.Errorf("export %s: response %s is not current", table, row["response_id"])
				break
			}
		}
	}
}

// pivot computes the wide rows of truth independently of package wide's
// pivot, rendered as the CSV export renders them (arrays "[a|b]", NULL "").
func pivot(t *testing.T, cols []wide.Column, truth map[string]survey.Response) map[string]map[string]string {
	t.Helper()
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
	want := map[string]map[string]string{}
	for id, r := range truth {
		row := map[string]string{"response_id": id, "response_status": r.ResponseStatus}
		for _, c := range cols {
			row[c.Name] = ""
			if wide.IsArray(c.Kind) {
				row[c.Name] = "[]"
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
					var v string
					switch q.Type {
					case "single", "matrix_single", "multiple", "matrix_multiple":
						v = str(a.ChoiceLabel) + str(a.ColumnLabel)
					case "scale":
						v = strconv.FormatInt(int64(*a.Value), 10)
					case "file_upload":
						if a.Text != nil {
							v = *a.Text
						} else {
							v = strings.ToLower(string(*a.FileID))
						}
					default: // essay, url_parameter
						v = str(a.Text)
					}
					cells[rowID] = append(cells[rowID], v)
					if _, ok := ids[rowID]; !ok {
						switch {
						case a.ChoiceID != nil:
							ids[rowID] = strconv.FormatInt(int64(*a.ChoiceID), 10)
						case a.ColumnID != nil:
							ids[rowID] = strconv.FormatInt(int64(*a.ColumnID), 10)
						}
					}
					if a.OtherID != nil {
						row[name[key{q.ID, 0, wide.PartOther}]] = str(a.Text)
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
						row[n] = "[" + strings.Join(vs, "|") + "]"
					default:
						row[n] = vs[0]
					}
					if n, ok := name[key{q.ID, rowID, wide.PartID}]; ok {
						row[n] = ids[rowID]
					}
				}
			}
		}
		want[id] = row
	}
	return want
}

// exportWide exports survey 4574's wide table as format and reads it
// back: rows by response id, column name → value as text.
func exportWide(t *testing.T, wh warehouse.Warehouse, format string, since time.Time) map[string]map[string]string {
	t.Helper()
	got := map[string]map[string]string{}
	if format == "csv" {
		for _, row := range exportCSV(t, wh, warehouse.ExportWide, surveyWide, since) {
			got[row["response_id"]] = row
		}
		return got
	}
	var buf bytes.Buffer
	n, err := wh.Exporter().Export(ctx(t), warehouse.ExportWide, surveyWide, since, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewParquet(&buf, fields)
	})
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if int(tbl.NumRows()) != n {
		t.Errorf("parquet export: says %d rows, wrote %d", n, tbl.NumRows())
	}
	tr := array.NewTableReader(tbl, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]string{}
			for j, f := range rec.Schema().Fields() {
				row[f.Name] = renderCell(rec.Column(j), i)
			}
			got[row["response_id"]] = row
		}
	}
	return got
}

func renderCell(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return ""
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.Uint64:
		return strconv.FormatUint(a.Value(i), 10)
	case *array.Timestamp:
		return a.Value(i).ToTime(arrow.Second).UTC().Format(time.DateTime)
	case *array.List:
		vals := a.ListValues().(*array.String)
		start, end := a.ValueOffsets(i)
		var vs []string
		for j := start; j < end; j++ {
			vs = append(vs, vals.Value(int(j)))
		}
		return "[" + strings.Join(vs, "|") + "]"
	}
	return fmt.Sprint(a.GetOneForMarshal(i))
}

// compareRows compares every cell of want with got, and says how many.
func compareRows(t *testing.T, what string, got, want map[string]map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	bad, cells := 0, 0
	for _, id := range ids {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: response %s missing", what, id)
			continue
		}
		cells += len(want[id])
		for col, w := range want[id] {
			gv, ok := g[col]
			if (!ok || gv != w) && bad < 20 {
				bad++
				t.Errorf("%s: response %s column %s = %q (present %v), want %q", what, id, col, gv, ok, w)
			}
		}
	}
	t.Logf("%s: %d rows, %d cells compared", what, len(got), cells)
}
