package warehousetest

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
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

// testFresh: a new store holds nothing, answers, and takes writes.
func testFresh(t *testing.T, s *suite) {
	c := ctx(t)
	wh := s.wh
	if err := wh.Ping(c); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if wh.String() == "" {
		t.Error("String is empty")
	}
	checks := wh.CheckWrites(c)
	if len(checks) == 0 {
		t.Error("CheckWrites checks nothing")
	}
	for _, ch := range checks {
		if ch.Table == "" || ch.Err != nil {
			t.Errorf("CheckWrites: %+v", ch)
		}
	}
	if has, err := wh.Privacy().HasData(c); err != nil || has {
		t.Errorf("HasData of a new store = %v, %v", has, err)
	}
	if st, err := wh.LoadStates(c); err != nil || len(st) != 0 {
		t.Errorf("LoadStates of a new store = %v, %v", st, err)
	}
	if sv, err := wh.LoadSurveys(c); err != nil || len(sv) != 0 {
		t.Errorf("LoadSurveys of a new store = %v, %v", sv, err)
	}
	if r, err := wh.Privacy().PrivacyRules(c); err != nil || r != nil {
		t.Errorf("PrivacyRules of a new store = %q, %v", r, err)
	}
	if e := wh.Eraser(); e != nil {
		if es, err := e.Erasures(c); err != nil || len(es) != 0 {
			t.Errorf("Erasures of a new store = %v, %v", es, err)
		}
	}
	idx, err := wh.FileIndex()
	if err != nil {
		t.Fatalf("FileIndex: %v", err)
	}
	if p, err := idx.Pending(c, 10); err != nil || len(p) != 0 {
		t.Errorf("Pending of a new store = %v, %v", p, err)
	}
	if got := current(t, wh, surveyWrite); len(got) != 0 {
		t.Errorf("current responses of a new store: %v", got)
	}
	write(t, wh, resp{survey: surveyWrite, n: 99, version: version(0)})
	if has, err := wh.Privacy().HasData(c); err != nil || !has {
		t.Errorf("HasData after a write = %v, %v", has, err)
	}
}

// testParts: each optional part is there or nil as the backend documents.
func testParts(t *testing.T, s *suite) {
	wh, want := s.wh, s.b.Parts
	got := Parts{
		Inventory:  wh.Inventory() != nil,
		WebhookLog: wh.WebhookLog() != nil,
		Eraser:     wh.Eraser() != nil,
		QueryConn:  wh.QueryConn() != nil,
		Leases:     wh.Leases() != nil,
	}
	if inv := wh.Inventory(); inv != nil {
		_, got.RejectInventory = inv.(warehouse.RejectInventory)
	}
	if got != want {
		t.Errorf("parts %+v, the backend documents %+v", got, want)
	}
	if wh.Privacy() == nil {
		t.Error("Privacy is nil")
	}
	if wh.Exporter() == nil {
		t.Error("Exporter is nil")
	}
	for name, open := range map[string]func() error{
		"FileIndex":  func() error { _, err := wh.FileIndex(); return err },
		"FeedLedger": func() error { _, err := wh.FeedLedger(); return err },
	} {
		if err := open(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Opened on first use, the same part after.
	a, _ := wh.FileIndex()
	b, _ := wh.FileIndex()
	if a == nil || b == nil {
		t.Error("FileIndex returned nil")
	}
}

// testWriteTwice: the same batch written twice (a retry after an error)
// leaves no visible duplicate in any table.
func testWriteTwice(t *testing.T, s *suite) {
	wh := s.wh
	rs := []resp{
		{survey: surveyWrite, n: 1, version: version(1), contact: 7, upload: true},
		{survey: surveyWrite, n: 2, version: version(1), status: survey.StatusPartial},
		{survey: surveyWrite, n: 3, version: version(1), status: survey.StatusDisqualified, noScale: true},
	}
	b := batch(t, rs...)
	defer b.Release()
	for i := range 2 {
		if err := wh.Write(ctx(t), b); err != nil {
			t.Fatalf("Write #%d: %v", i+1, err)
		}
	}
	want := map[string]string{guid(surveyWrite, 99): survey.StatusCompleted} // Fresh's
	answers := 3                                                             // Fresh's
	for _, r := range rs {
		st := r.status
		if st == "" {
			st = survey.StatusCompleted
		}
		want[r.id()] = st
		answers += r.answers()
	}
	if got := current(t, wh, surveyWrite); !maps.Equal(got, want) {
		t.Errorf("current responses %v, want %v", got, want)
	}
	if rows := exportCSV(t, wh, warehouse.ExportResponses, surveyWrite, time.Time{}); len(rows) != len(want) {
		t.Errorf("export responses: %d rows, want %d", len(rows), len(want))
	}
	if rows := exportCSV(t, wh, warehouse.ExportAnswers, surveyWrite, time.Time{}); len(rows) != answers {
		t.Errorf("export answers: %d rows, want %d", len(rows), answers)
	}
	if rows := exportCSV(t, wh, warehouse.ExportWide, surveyWrite, time.Time{}); len(rows) != len(want) {
		t.Errorf("export wide: %d rows, want %d", len(rows), len(want))
	}
	if inv := wh.Inventory(); inv != nil {
		for _, tc := range []struct {
			survey int64
			id     string
			want   bool
		}{
			{surveyWrite, rs[0].id(), true},
			{surveyWrite, strings.ToUpper(rs[1].id()), true},
			{surveyWrite, guid(surveyWrite, 404), false},
			{surveyVersions, rs[0].id(), false}, // another survey's
		} {
			if got, err := inv.HasResponse(ctx(t), tc.survey, survey.GUID(tc.id)); err != nil || got != tc.want {
				t.Errorf("HasResponse(%d, %s) = %v, %v; want %v", tc.survey, tc.id, got, err, tc.want)
			}
		}
	}
}

// testVersions: a newer version replaces a response's rows (its answers
// too), an older one arriving late changes nothing, and a deletion takes
// the response out of every current row.
func testVersions(t *testing.T, s *suite) {
	wh := s.wh
	v1 := []resp{
		{survey: surveyVersions, n: 1, version: version(10)},
		{survey: surveyVersions, n: 2, version: version(10), status: survey.StatusPartial},
		{survey: surveyVersions, n: 3, version: version(10)},
	}
	write(t, wh, v1...)
	// n=1 completes anew with an answer fewer; n=2 completes; n=3 is
	// deleted; in one batch.
	write(t, wh,
		resp{survey: surveyVersions, n: 1, version: version(20), noScale: true, synced: base.Add(time.Hour)},
		resp{survey: surveyVersions, n: 2, version: version(20), synced: base.Add(time.Hour)},
		resp{survey: surveyVersions, n: 3, version: version(20), deleted: true, synced: base.Add(time.Hour)},
	)
	// An older version of n=2 read late (a slow fetch), partial again.
	write(t, wh, resp{survey: surveyVersions, n: 2, version: version(15), status: survey.StatusPartial})

	want := map[string]string{guid(surveyVersions, 1): survey.StatusCompleted, guid(surveyVersions, 2): survey.StatusCompleted}
	if got := current(t, wh, surveyVersions); !maps.Equal(got, want) {
		t.Errorf("current responses %v, want %v", got, want)
	}
	if inv := wh.Inventory(); inv != nil {
		if ok, err := inv.HasResponse(ctx(t), surveyVersions, survey.GUID(guid(surveyVersions, 3))); err != nil || ok {
			t.Errorf("HasResponse of a deleted response = %v, %v", ok, err)
		}
	}
	ans := exportCSV(t, wh, warehouse.ExportAnswers, surveyVersions, time.Time{})
	if len(ans) != 2+3 {
		t.Errorf("export answers: %d rows, want 5 (the current versions')", len(ans))
	}
	wantEssays := []string{guid(surveyVersions, 1) + "=essay v" + itoa(version(20)), guid(surveyVersions, 2) + "=essay v" + itoa(version(20))}
	var essays []map[string]string
	for _, r := range ans {
		if r["question_id"] == itoa(qEssay) {
			essays = append(essays, r)
		}
	}
	if got := column(essays, "text", true); !slices.Equal(got, wantEssays) {
		t.Errorf("essays %v, want %v", got, wantEssays)
	}
	resps := exportCSV(t, wh, warehouse.ExportResponses, surveyVersions, time.Time{})
	if got, want := column(resps, "_version", true), []string{guid(surveyVersions, 1) + "=" + itoa(version(20)), guid(surveyVersions, 2) + "=" + itoa(version(20))}; !slices.Equal(got, want) {
		t.Errorf("export responses: versions %v, want %v", got, want)
	}
	wideRows := exportCSV(t, wh, warehouse.ExportWide, surveyVersions, time.Time{})
	if got, want := column(wideRows, "zlepseni", true), wantEssays; !slices.Equal(got, want) {
		t.Errorf("export wide: essays %v, want %v", got, want)
	}
	// since: the two written at base+1h; none after.
	if rows := exportCSV(t, wh, warehouse.ExportResponses, surveyVersions, base.Add(time.Hour)); len(rows) != 2 {
		t.Errorf("export responses since the second write: %d rows, want 2", len(rows))
	}
	if rows := exportCSV(t, wh, warehouse.ExportWide, surveyVersions, base.Add(time.Hour+time.Second)); len(rows) != 0 {
		t.Errorf("export wide since after the last write: %d rows, want 0", len(rows))
	}
	if rows := exportCSV(t, wh, warehouse.ExportAnswers, surveyVersions, base.Add(time.Hour)); len(rows) != 5 {
		t.Errorf("export answers since the second write: %d rows, want 5", len(rows))
	}
	// A survey never written has no rows in the long tables and no wide
	// table (an error); a table the contract does not name is an error.
	for _, table := range []string{warehouse.ExportResponses, warehouse.ExportAnswers} {
		if rows := exportCSV(t, wh, table, surveyVersions+1000, time.Time{}); len(rows) != 0 {
			t.Errorf("export %s of a survey never written: %d rows", table, len(rows))
		}
	}
	discard := func(fields []wide.Field) (wide.Writer, error) { return wide.NewCSV(io.Discard, fields, false) }
	if n, err := wh.Exporter().Export(ctx(t), warehouse.ExportWide, surveyVersions+1000, time.Time{}, discard); err == nil {
		t.Errorf("export wide of a survey never written: %d rows, no error", n)
	}
	if _, err := wh.Exporter().Export(ctx(t), "sync_state", surveyVersions, time.Time{}, discard); err == nil {
		t.Error("export of table sync_state: no error")
	}
}

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
