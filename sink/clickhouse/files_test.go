package clickhouse

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// TestFileIndexJoinsAnswers: uploaded_files_current joins answers_current
// by (response_id, question_id) (docs/schema.md). The index's contract is
// the warehouse suite's (TestWarehouseSuite).
func TestFileIndexJoinsAnswers(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	x := NewFileIndex(s)
	rid := survey.GUID(guid(901))
	at := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	stored := func(q int64, f int, v uint64) files.Record {
		return files.Record{FileRef: files.FileRef{SurveyID: 42, ResponseID: rid, QuestionID: q, FileID: survey.GUID(guid(5000 + f))},
			FileName: "Přihláška – životopis.pdf", SHA256: "ab12", StoredAt: at, Version: v}
	}
	failed := stored(1001, 2, 11)
	failed.SHA256, failed.Error = "", "copy file …: unexpected EOF"
	if err := x.Record(ctx, []files.Record{stored(1001, 1, 10), stored(1001, 3, 20), failed, stored(7, 4, 12)}); err != nil {
		t.Fatal(err)
	}

	// Joinable to answers_current by (response_id, question_id).
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	done := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	b := buildBatch(mem, []testResponse{{ID: string(rid), SurveyID: 42, Version: 5, Completed: &done, Answers: 2}})
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Release()
	mem.AssertSize(t, 0)
	var n uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.table("answers_current")+" AS a ALL INNER JOIN "+
		"(SELECT response_id, question_id, file_name FROM "+s.table("uploaded_files_current")+" WHERE error = '') AS f "+
		"USING (response_id, question_id)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("answers joined to stored files = %d, want 2 (files 1 and 3 of question 1001)", n)
	}
}

func TestFileIndexUndiscovered(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	x := NewFileIndex(s)
	rid := guid(903)
	f := func(n int) string { return guid(7000 + n) }
	// Inserts through batches: the old server hangs on INSERT … VALUES over Exec.
	rb, err := s.Conn().PrepareBatch(ctx, "INSERT INTO "+s.table("responses")+" (response_id, survey_id, response_status, is_deleted, _version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := rb.Append(rid, int64(42), "completed", uint8(0), uint64(5)); err != nil {
		t.Fatal(err)
	}
	if err := rb.Send(); err != nil {
		t.Fatal(err)
	}
	ab, err := s.Conn().PrepareBatch(ctx, "INSERT INTO "+s.table("answers")+" (response_id, survey_id, question_id, question_index, question_type, text, _version)")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		q         int64
		typ, text string
	}{
		{2001, "file_upload", strings.ToUpper(f(1)) + ", " + f(2)},
		{2002, "FileUpload", f(3)},
		{2003, "essay", f(4)},
		{2004, "file_upload", f(5)},
	} {
		// question_index differs: answers' sorting key would collapse the rows otherwise
		if err := ab.Append(rid, int64(42), a.q, uint16(a.q-2000), a.typ, a.text, uint64(5)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ab.Send(); err != nil {
		t.Fatal(err)
	}
	// Question 2004's file is already known to the index (even as pending).
	if err := x.Record(ctx, []files.Record{{FileRef: files.FileRef{SurveyID: 42, ResponseID: survey.GUID(rid), QuestionID: 2004,
		FileID: survey.GUID(f(5))}, Error: "pending: copy queue full"}}); err != nil {
		t.Fatal(err)
	}
	got, err := x.Undiscovered(ctx, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].FileID < got[j].FileID })
	want := []files.FileRef{
		{SurveyID: 42, ResponseID: survey.GUID(rid), QuestionID: 2001, FileID: survey.GUID(f(1))},
		{SurveyID: 42, ResponseID: survey.GUID(rid), QuestionID: 2001, FileID: survey.GUID(f(2))},
		{SurveyID: 42, ResponseID: survey.GUID(rid), QuestionID: 2002, FileID: survey.GUID(f(3))},
	}
	if len(got) != len(want) {
		t.Fatalf("Undiscovered = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Undiscovered[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, _ := x.Undiscovered(ctx, []string{"essay"}, 100); len(got) != 1 || got[0].QuestionID != 2003 {
		t.Errorf("Undiscovered(essay) = %+v", got)
	}
}
