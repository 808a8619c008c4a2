package clickhouse

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
)

// TestSchemaDocQueries runs every ```sql block of docs/schema.md on the
// test server, against a database holding a few responses.
func TestSchemaDocQueries(t *testing.T) {
	doc, err := os.ReadFile("../../docs/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 5 {
		t.Fatalf("docs/schema.md has %d sql blocks", len(blocks))
	}
	s, _ := openTest(t, nil)
	done := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 4574, Version: 1, Completed: &done, Answers: 6, Params: [][2]string{{"utm_source", "mail"}}},
		{ID: guid(2), SurveyID: 4574, Version: 1, Completed: &done, Answers: 4},
		{ID: "da453b67-791e-4d4d-9009-75b1ed8a33c1", SurveyID: 4574, Version: 1, Status: "partial", Answers: 2},
	})
	if err := s.SaveStates(ctxT(t), []pipeline.StreamState{{SurveyID: 4574, Stream: "completed", Watermark: done}}); err != nil {
		t.Fatal(err)
	}
	// The emulator's responses (every question type, uploads and URL
	// parameters included), completed in the last days, as the demo
	// writes them: the queries' meaning is checked on them (and the wide
	// view survey_4574 of the "Wide tables" examples is made from them).
	mem := memory.NewGoAllocator()
	batch := flattenBatch(t, mem, emulatorItemsAt(t, 200, 10, time.Now().UTC()))
	if err := s.Write(ctxT(t), batch); err != nil {
		t.Fatal(err)
	}
	batch.Release()
	ran := map[string][][]string{} // first line of the query → its rows, as text
	for i, b := range blocks {
		sql := strings.ReplaceAll(b[1], "surveysync.", s.Database()+".")
		rows, err := s.Conn().Query(ctxT(t), sql)
		if err != nil {
			t.Errorf("docs/schema.md query %d: %v\n%s", i+1, err, b[1])
			continue
		}
		var got [][]string
		for rows.Next() {
			cols := rows.ColumnTypes()
			vals := make([]any, len(cols))
			for j, c := range cols {
				vals[j] = reflect.New(c.ScanType()).Interface()
			}
			if err := rows.Scan(vals...); err != nil {
				t.Errorf("docs/schema.md query %d: scan: %v", i+1, err)
				break
			}
			row := make([]string, len(vals))
			for j, v := range vals {
				row[j] = fmt.Sprint(reflect.ValueOf(v).Elem().Interface())
			}
			got = append(got, row)
		}
		if err := rows.Err(); err != nil {
			t.Errorf("docs/schema.md query %d: %v", i+1, err)
		}
		rows.Close()
		t.Logf("query %d: %d rows", i+1, len(got))
		ran[strings.TrimSpace(b[1])] = got
	}
	checkDocMeaning(t, s, string(doc), ran)
}

// emulatorItemsAt is emulatorItems with the emulator's clock at now.
func emulatorItemsAt(tb testing.TB, n int, version uint64, now time.Time) []flatten.Item {
	tb.Helper()
	sm, err := sim.New(sim.Options{Now: func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: n, Seed: 1, Files: true}}})
	if err != nil {
		tb.Fatal(err)
	}
	defer sm.Close()
	var items []flatten.Item
	for r := range sm.Responses(4574) {
		items = append(items, flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: version, SyncedAt: now})
	}
	return items
}

// docQuery returns the rows of the query of docs/schema.md that contains
// marker; the test fails when none or several do.
func docQuery(t *testing.T, ran map[string][][]string, marker string) [][]string {
	t.Helper()
	var found [][][]string
	for q, rows := range ran {
		if strings.Contains(q, marker) {
			found = append(found, rows)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/schema.md: %d queries contain %q, want 1", len(found), marker)
	}
	return found[0]
}

// checkDocMeaning checks what docs/schema.md says of the data against the
// data: the question types it lists are those stored, the open-text query
// returns only text answers (no file id, no URL parameter value), and the
// question list shows the questions a pivot on variable leaves out.
func checkDocMeaning(t *testing.T, s *Sink, doc string, ran map[string][][]string) {
	t.Helper()
	stored := map[string]bool{}
	rows, err := s.Conn().Query(ctxT(t), "SELECT DISTINCT question_type FROM "+s.table("answers_current")+" WHERE survey_id = 4574 AND _version = 10")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		stored[v] = true
	}
	rows.Close()
	line := regexp.MustCompile("(?m)^\\| `question_type` \\|.*$").FindString(doc)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(line, -1) {
		documented[m[1]] = true
	}
	delete(documented, "question_type")
	for v := range stored {
		if !documented[v] {
			t.Errorf("docs/schema.md, question_type: the stored value %q is not listed", v)
		}
	}
	for _, v := range []string{"url_parameter", "single", "multiple", "matrix_single", "matrix_multiple", "scale", "essay", "file_upload"} {
		if !stored[v] {
			t.Errorf("question_type %q documented but not stored by the emulator's data", v)
		}
	}

	// Open-text answers: none is a file id or a URL parameter's value.
	notText := map[string]bool{}
	rows, err = s.Conn().Query(ctxT(t), "SELECT text FROM "+s.table("answers_current")+
		" WHERE survey_id = 4574 AND question_type IN ('file_upload', 'url_parameter') AND text != ''")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		notText[v] = true
	}
	rows.Close()
	if len(notText) == 0 {
		t.Fatal("the test data has no uploads or URL parameters: the open-text check would prove nothing")
	}
	open := docQuery(t, ran, "other_id IS NOT NULL") // SELECT date_completed, question_title, text
	if len(open) == 0 {
		t.Error("the open-text query returns nothing on the emulator's data")
	}
	for _, r := range open {
		if notText[r[2]] {
			t.Errorf("the open-text query returns %q, a file id or URL parameter value", r[2])
		}
	}

	// The question list shows the questions without a variable, which a
	// pivot on variable would leave out.
	empty := 0
	for _, r := range docQuery(t, ran, "any(variable) AS variable") { // question_id, type, variable, question, answers
		if r[2] == "" && r[4] != "0" {
			empty++
		}
	}
	if empty == 0 {
		t.Error("the question list shows no question without a variable: the data or the note is wrong")
	}
}
