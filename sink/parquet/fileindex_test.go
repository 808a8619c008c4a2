package parquet

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline/files"
)

var (
	testAt  = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	testRef = files.FileRef{SurveyID: 1, ResponseID: "aaaaaaaa-0000-4000-8000-000000000001", QuestionID: 1, FileID: "bbbbbbbb-0000-4000-8000-000000000001"}
)

func checkStored(t *testing.T, ix *FileIndex) {
	t.Helper()
	got, ok := ix.Get(testRef)
	if !ok || got.Version != 5000 || got.SHA256 != "abc" || got.FileName != "Přihláška – životopis.pdf" || !got.StoredAt.Equal(testAt) {
		t.Fatalf("latest row: %+v", got)
	}
	if p, _ := ix.Pending(context.Background(), 0); len(p) != 0 {
		t.Errorf("pending = %+v", p)
	}
	if n := len(ix.All()); n != 1 {
		t.Errorf("%d files, want 1", n)
	}
}

// Many versions of one file, recorded out of order: the newest wins, and
// after a reopen too.
func TestFileIndexKeepsNewestAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "uploaded_files.db")
	ix, err := OpenFileIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stored := files.Record{FileRef: testRef, ObjectURL: "file:///x", FileName: "Přihláška – životopis.pdf", Size: 3, SHA256: "abc", StoredAt: testAt, Attempts: 2000, Version: 5000}
	if err := ix.Record(ctx, []files.Record{{FileRef: testRef, StoredAt: testAt, Error: "boom", Attempts: 1, Version: 1}, stored}); err != nil {
		t.Fatal(err)
	}
	for v := 2000; v >= 1000; v-- {
		if err := ix.Record(ctx, []files.Record{{FileRef: testRef, StoredAt: testAt, Error: "boom", Attempts: v, Version: uint64(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	checkStored(t, ix)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if ix, err = OpenFileIndex(path); err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	checkStored(t, ix)
}

// An index of the former format (uploaded_files.jsonl: appended versions,
// a line torn by a crash) is imported at the first open and removed.
func TestFileIndexImportsFormerJSONL(t *testing.T) {
	dir := t.TempDir()
	var lines []byte
	for v := 2000; v >= 1; v-- {
		b, _ := json.Marshal(toJSON(files.Record{FileRef: testRef, StoredAt: testAt, Error: "boom", Attempts: v, Version: uint64(v)}))
		lines = append(append(lines, b...), '\n')
	}
	b, _ := json.Marshal(toJSON(files.Record{FileRef: testRef, ObjectURL: "file:///x", FileName: "Přihláška – životopis.pdf", Size: 3, SHA256: "abc", StoredAt: testAt, Attempts: 2000, Version: 5000}))
	lines = append(append(lines, b...), '\n')
	lines = append(lines, `{"file_id":"bbbb`...)
	former := filepath.Join(dir, "uploaded_files.jsonl")
	if err := os.WriteFile(former, lines, 0o640); err != nil {
		t.Fatal(err)
	}
	ix, err := OpenFileIndex(filepath.Join(dir, "uploaded_files.db"))
	if err != nil {
		t.Fatal(err)
	}
	checkStored(t, ix)
	ix.Close()
	if _, err := os.Stat(former); !os.IsNotExist(err) {
		t.Errorf("the former file is still there: %v", err)
	}
	// A crash after the import, before the removal: the file is only removed.
	if err := os.WriteFile(former, lines, 0o640); err != nil {
		t.Fatal(err)
	}
	ix, err = OpenFileIndex(filepath.Join(dir, "uploaded_files.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	checkStored(t, ix)
	if _, err := os.Stat(former); !os.IsNotExist(err) {
		t.Errorf("the former file is still there: %v", err)
	}
}

// Remove deletes the rows it selects, and no byte of them is left in the
// file (compacted), across a reopen too.
func TestFileIndexRemoveLeavesNoBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "uploaded_files.db")
	ix, err := OpenFileIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	other := testRef
	other.ResponseID, other.FileID = "aaaaaaaa-0000-4000-8000-000000000002", "bbbbbbbb-0000-4000-8000-000000000002"
	if err := ix.Record(context.Background(), []files.Record{{FileRef: testRef, Version: 1}, {FileRef: other, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	n, err := ix.Remove(func(r files.Record) bool { return r.ResponseID == testRef.ResponseID })
	if err != nil || n != 1 {
		t.Fatalf("Remove = %d, %v", n, err)
	}
	if _, ok := ix.Get(testRef); ok || len(ix.All()) != 1 {
		t.Errorf("after Remove: %+v", ix.All())
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), string(testRef.ResponseID)) || !strings.Contains(string(raw), string(other.ResponseID)) {
		t.Error("the removed row's bytes are still in the file, or the other row's are not")
	}
	ix, err = OpenFileIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if len(ix.All()) != 1 {
		t.Errorf("after reopen: %+v", ix.All())
	}
}
