package parquet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

var _ pipeline.RejectStore = (*Sink)(nil)

func readRejects(t *testing.T, dir string) []rejectEntry {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, rejectsDirName, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []rejectEntry
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e rejectEntry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, e)
		}
		fh.Close()
	}
	return out
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2026, 11, 22, 4, 30, 1, 0, time.UTC)
	recs := []pipeline.Reject{
		{SurveyID: 4574, ResponseID: "da453b67-791e-4d4d-9009-75b1ed8a33c1", Stage: pipeline.StageFlatten, Reason: "date_out_of_range",
			Error: "date_completed 2200-01-01T00:00:00Z is outside 1970-01-01..2106-02-07", Source: "poll", RejectedAt: at},
		{SurveyID: 4574, ResponseID: "not-a-guid", Stage: pipeline.StageFetch, Reason: "decode", Error: "špatný \"JSON\"\n", Source: "webhook", RejectedAt: at},
	}
	if err := s.WriteRejects(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// The same records again (a retry) replace the same file.
	if err := s.WriteRejects(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRejects(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got := readRejects(t, dir)
	if len(got) != 2 {
		t.Fatalf("got %d records, want 2: %+v", len(got), got)
	}
	for i, e := range got {
		want := recs[i]
		if e.SurveyID != want.SurveyID || e.ResponseID != string(want.ResponseID) || e.Stage != want.Stage || e.Reason != want.Reason ||
			e.Error != want.Error || e.Source != want.Source || !e.RejectedAt.Equal(want.RejectedAt) {
			t.Errorf("record %d = %+v, want %+v", i, e, want)
		}
	}
	// Another rejection later: a second file.
	if err := s.WriteRejects(ctx, []pipeline.Reject{{SurveyID: 1, ResponseID: "x", Stage: pipeline.StageWrite, Reason: "bad_value", RejectedAt: at.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if n := len(readRejects(t, dir)); n != 3 {
		t.Fatalf("%d records after a second rejection, want 3", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteRejects(ctx, recs); err == nil {
		t.Fatal("WriteRejects after Close succeeded")
	}
}

// A crash before the rename leaves no visible file; the next Open removes
// the temporary one.
func TestWriteRejectsNoPartialFile(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.testHookBeforeRename = func(tmp string) error {
		// Simulate a crash: leave a copy of the temporary file behind, as a
		// killed process would, and fail the write.
		b, _ := os.ReadFile(tmp)
		_ = os.WriteFile(filepath.Join(filepath.Dir(tmp), ".crashed.tmp"), b, 0o644)
		return errors.New("crash")
	}
	err = s.WriteRejects(context.Background(), []pipeline.Reject{{SurveyID: 1, ResponseID: "x", Stage: "fetch", Reason: "decode", RejectedAt: time.Now()}})
	if err == nil || !strings.Contains(err.Error(), "crash") {
		t.Fatalf("err = %v, want the crash", err)
	}
	if n := len(readRejects(t, dir)); n != 0 {
		t.Fatalf("%d records visible after a failed write", n)
	}
	if _, err := Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if left := tempFiles(t, filepath.Join(dir, rejectsDirName)); len(left) != 0 {
		t.Fatalf("temporary files left after Open: %v", left)
	}
}
