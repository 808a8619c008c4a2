package parquet

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/wide"
)

// TestExportWideMatchesEmulator writes the emulator's survey 4574 (every
// question kind, uploads, Czech labels) through the Parquet sink in several
// batches, then a response with a question the survey did not have whose
// variable sanitises to an existing column's name, a new version of a
// response and a deletion; it compares ExportWide's CSV and Parquet output
// with a pivot computed here from the emulator's responses, and checks
// --since and the choice-id columns.
func TestExportWideMatchesEmulator(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	em, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: 120, Seed: 1, Files: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	truth := map[string]survey.Response{}
	version := uint64(0)
	write := func(at time.Time, rs []survey.Response, deleted ...string) {
		t.Helper()
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		b := flatten.NewBuilder(mem)
		defer b.Release()
		for _, r := range rs {
			version++
			if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: version, SyncedAt: at}); err != nil {
				t.Fatal(err)
			}
			truth[strings.ToLower(string(r.ResponseID))] = r
		}
		for _, id := range deleted {
			version++
			if err := b.Add(flatten.Item{SurveyID: 4574, ResponseID: survey.GUID(id), Deleted: true, Version: version, SyncedAt: at}); err != nil {
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
	write(now, all[:40])
	write(now, all[40:])

	// A new question (variable "Zlepšení" sanitises to "zlepseni", the open
	// question's), a new version of a response, a deletion: later.
	later := now.Add(time.Hour)
	r, err := em.AddResponse(4574, survey.Response{ResponseStatus: survey.StatusCompleted})
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
	write(later, []survey.Response{r, changed}, strings.ToLower(string(all[5].ResponseID)))

	cols, err := WideColumns(ctx, dir, 4574, true)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]wide.Column{}
	for _, c := range cols {
		names[c.Name] = c
	}
	for _, n := range []string{"source", "spokojenost", "spokojenost_id", "zdroj", "zdroj_other", "produkty", "hodnoceni_cena",
		"hodnoceni_cena_id", "nps", "zlepseni", "prilohy", "zlepseni_424242", "zlepseni_424242_id"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no column %s", n)
		}
	}
	if c := names["zlepseni_424242"]; c.QuestionID != 424242 || c.Kind != wide.KindLabel || c.Title != "Zlepšení (nová otázka)" {
		t.Errorf("new question's column: %+v", c)
	}

	want := pivotTruth(t, cols, truth)
	for _, format := range []string{"csv", "parquet"} {
		got, n := exportRows(t, dir, format, WideOptions{ChoiceIDs: true}, true)
		if n != len(truth) {
			t.Errorf("%s: %d rows, want %d", format, n, len(truth))
		}
		compareRows(t, format, got, want)
	}
	// Without choice ids: no _id columns.
	got, _ := exportRows(t, dir, "csv", WideOptions{}, false)
	for _, row := range got {
		if _, ok := row["spokojenost_id"]; ok {
			t.Error("a choice-id column without ChoiceIDs")
		}
		break
	}
	// --since: only the two responses written later.
	got, n := exportRows(t, dir, "csv", WideOptions{Since: later}, false)
	if n != 2 || got[strings.ToLower(string(changed.ResponseID))]["spokojenost"] != "Úplně jinak" {
		t.Errorf("since %s: %d rows %v", later, n, got)
	}
	if _, n := exportRows(t, dir, "csv", WideOptions{Since: later.Add(time.Second)}, false); n != 0 {
		t.Errorf("since after the last write: %d rows", n)
	}

	// The long tables: every current response once, and exactly the
	// answers rows flatten makes of the current versions.
	wantAnswers := 0
	for _, r := range truth {
		b := flatten.NewBuilder(memory.NewGoAllocator())
		if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: 1, SyncedAt: now}); err != nil {
			t.Fatal(err)
		}
		batch := b.Flush()
		_, a := batch.Rows()
		wantAnswers += int(a)
		batch.Release()
		b.Release()
	}
	for table, want := range map[string]int{"responses": len(truth), "answers": wantAnswers} {
		var buf bytes.Buffer
		n, err := ExportTable(ctx, dir, table, 4574, WideOptions{}, func(fields []wide.Field) (wide.Writer, error) {
			return wide.NewCSV(&buf, fields, false)
		})
		recs, cerr := csv.NewReader(&buf).ReadAll()
		if err != nil || cerr != nil || n != want || len(recs) != want+1 {
			t.Errorf("ExportTable %s: %d rows, %d records (%v, %v), want %d", table, n, len(recs)-1, err, cerr, want)
		}
		for _, rec := range recs[1:] {
			if _, ok := truth[rec[0]]; !ok {
				t.Errorf("ExportTable %s: response %s is not current", table, rec[0])
				break
			}
		}
	}
	if n, err := ExportTable(ctx, dir, "answers", 4574, WideOptions{Since: later}, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewCSV(io.Discard, fields, false)
	}); err != nil || n == 0 {
		t.Errorf("ExportTable answers since %s: %d rows (%v)", later, n, err)
	}
}

// pivotTruth computes the wide rows of truth independently of package
// wide's pivot, rendered as the CSV export renders them (arrays as
// "[a|b]").
func pivotTruth(t *testing.T, cols []wide.Column, truth map[string]survey.Response) map[string]map[string]string {
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
			switch {
			case wide.IsArray(c.Kind):
				row[c.Name] = "[]"
			default:
				row[c.Name] = ""
			}
		}
		for _, p := range r.Pages {
			for _, q := range p.Questions {
				cells := map[int64][]string{}
				ids := map[int64]string{}
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
					default:
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

// exportRows exports survey 4574 from dir and reads the output back: rows
// by response id, column name → value as text (arrays "[a|b]").
func exportRows(t *testing.T, dir, format string, o WideOptions, bom bool) (map[string]map[string]string, int) {
	t.Helper()
	var buf bytes.Buffer
	n, err := ExportWide(context.Background(), dir, 4574, o, func(fields []wide.Field) (wide.Writer, error) {
		if format == "parquet" {
			return wide.NewParquet(&buf, fields)
		}
		return wide.NewCSV(&buf, fields, bom)
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	if format == "csv" {
		data := buf.Bytes()
		if bom != bytes.HasPrefix(data, []byte("\ufeff")) {
			t.Errorf("BOM %v, file starts %q", bom, data[:min(len(data), 8)])
		}
		recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(data, []byte("\ufeff")))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs[1:] {
			row := map[string]string{}
			for i, h := range recs[0] {
				v := rec[i]
				if strings.HasPrefix(v, "[") {
					var vs []string
					if err := json.Unmarshal([]byte(v), &vs); err != nil {
						t.Fatalf("column %s: %q: %v", h, v, err)
					}
					v = "[" + strings.Join(vs, "|") + "]"
				}
				row[h] = v
			}
			got[row["response_id"]] = row
		}
		if len(recs)-1 != n {
			t.Errorf("CSV has %d records, ExportWide says %d", len(recs)-1, n)
		}
		return got, n
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
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
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
	return got, n
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
			if g[col] != w && bad < 20 {
				bad++
				t.Errorf("%s: response %s column %s = %q, want %q", what, id, col, g[col], w)
			}
		}
	}
	t.Logf("%s: %d rows, %d cells compared", what, len(got), cells)
}
