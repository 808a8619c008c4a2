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

func TestFileIndex(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	x := NewFileIndex(s)
	rid := survey.GUID(guid(901))
	other := survey.GUID(guid(902))
	fid := func(n int) survey.GUID { return survey.GUID(guid(5000 + n)) }
	at := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	stored := files.Record{
		FileRef:   files.FileRef{SurveyID: 42, ResponseID: rid, QuestionID: 1001, FileID: fid(1)},
		ObjectURL: "s3://bucket/surveys/42/responses/" + string(rid) + "/" + string(fid(1)),
		FileName:  "Přihláška – životopis.pdf", ContentType: "application/pdf", Size: 12345,
		SHA256: "ab12", StoredAt: at, Version: 10,
	}
	failedOnce := files.Record{FileRef: files.FileRef{SurveyID: 42, ResponseID: rid, QuestionID: 1001, FileID: fid(2)},
		StoredAt: at, Error: "copy file …: unexpected EOF", Attempts: 1, Version: 11}
	failedThenStored := failedOnce
	failedThenStored.FileID = fid(3)
	laterStored := stored
	laterStored.FileID, laterStored.Attempts, laterStored.Version = fid(3), 1, 20
	gone := files.Record{FileRef: files.FileRef{SurveyID: 42, ResponseID: other, QuestionID: 7, FileID: fid(4)}, SHA256: "cd", Size: 1, StoredAt: at, Version: 12}
	goneDeleted := gone
	goneDeleted.Deleted, goneDeleted.Version = true, 30

	// Two inserts, versions out of order across them.
	if err := x.Record(ctx, []files.Record{laterStored, stored, gone, goneDeleted}); err != nil {
		t.Fatal(err)
	}
	if err := x.Record(ctx, []files.Record{failedOnce, failedThenStored}); err != nil {
		t.Fatal(err)
	}

	pending, err := x.Pending(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].FileID != fid(2) || pending[0].Attempts != 1 || pending[0].Error == "" || !pending[0].StoredAt.Equal(at) {
		t.Fatalf("Pending = %+v, want only file 2", pending)
	}
	live, err := x.FilesOf(ctx, 42, rid)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 3 {
		t.Fatalf("FilesOf = %+v, want 3 files", live)
	}
	got := live[0]
	if got.FileID != fid(1) || got.FileName != stored.FileName || got.Size != 12345 || got.SHA256 != "ab12" ||
		got.ContentType != "application/pdf" || got.ObjectURL != stored.ObjectURL || got.Version != 10 || got.QuestionID != 1001 {
		t.Errorf("FilesOf[0] = %+v", got)
	}
	if live[2].FileID != fid(3) || live[2].SHA256 != "ab12" || live[2].Error != "" {
		t.Errorf("FilesOf[2] = %+v, want the stored version", live[2])
	}
	if deleted, _ := x.FilesOf(ctx, 42, other); len(deleted) != 0 {
		t.Errorf("deleted response's files are listed: %+v", deleted)
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
