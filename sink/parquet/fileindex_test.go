package parquet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline/files"
)

func TestJSONLIndexReopenAndCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "uploaded_files.jsonl")
	ix, err := OpenJSONLIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	r := files.FileRef{SurveyID: 1, ResponseID: "aaaaaaaa-0000-4000-8000-000000000001", QuestionID: 1, FileID: "bbbbbbbb-0000-4000-8000-000000000001"}
	// Many versions of one file, written out of order; then a stored one.
	for v := 2000; v >= 1; v-- {
		if err := ix.Record(ctx, []files.Record{{FileRef: r, StoredAt: at, Error: "boom", Attempts: v, Version: uint64(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	stored := files.Record{FileRef: r, ObjectURL: "file:///x", FileName: "Přihláška – životopis.pdf", Size: 3, SHA256: "abc", StoredAt: at, Attempts: 2000, Version: 5000}
	if err := ix.Record(ctx, []files.Record{stored}); err != nil {
		t.Fatal(err)
	}
	ix.Close()
	// A line torn by a crash is skipped.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"file_id":"bbbb`)
	f.Close()

	ix, err = OpenJSONLIndex(path) // compacts: 2001 lines for 1 file
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	got, ok := ix.Get(r)
	if !ok || got.Version != 5000 || got.SHA256 != "abc" || got.FileName != "Přihláška – životopis.pdf" || !got.StoredAt.Equal(at) {
		t.Fatalf("after reopen: %+v", got)
	}
	if p, _ := ix.Pending(ctx, 0); len(p) != 0 {
		t.Errorf("pending = %+v", p)
	}
	b, _ := os.ReadFile(path)
	if n := len(splitLines(b)); n != 1 {
		t.Errorf("compacted file has %d lines, want 1", n)
	}
}

func splitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}
