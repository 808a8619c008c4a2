package clickhouse

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
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
	// The demo's survey as the emulator makes it, for the wide view's
	// examples (its variables, matrix rows and uploads).
	writeEmulatorResponses(t, s, 40)
	if err := s.SaveStates(ctxT(t), []pipeline.StreamState{{SurveyID: 4574, Stream: "completed", Watermark: done}}); err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		sql := strings.ReplaceAll(b[1], "surveysync.", s.Database()+".")
		rows, err := s.Conn().Query(ctxT(t), sql)
		if err != nil {
			t.Errorf("docs/schema.md query %d: %v\n%s", i+1, err, b[1])
			continue
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Errorf("docs/schema.md query %d: %v", i+1, err)
		}
		rows.Close()
		t.Logf("query %d: %d rows", i+1, n)
	}
}
