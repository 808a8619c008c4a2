package parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

func recordErasures(t *testing.T, er warehouse.Eraser, n int) {
	t.Helper()
	for i := range n {
		e := warehouse.Erasure{ResponseKey: warehouse.ResponseKey{SurveyID: 3177, ResponseID: survey.GUID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))},
			Reason: warehouse.ReasonRequest, State: warehouse.ErasureDone, RequestedAt: time.Now().UTC().Truncate(time.Second)}
		if err := er.RecordErasures(context.Background(), []warehouse.Erasure{e}); err != nil {
			t.Fatal(err)
		}
	}
}

// A damaged erasures log (its lines are the tombstones) is an error naming
// the file, the line and the fix; cut short at a line's end too (the
// recorded length shows it).
func TestDamagedErasuresLogIsRefused(t *testing.T) {
	cuts := append(garblings[:len(garblings):len(garblings)], struct {
		name string
		fn   func([]byte) []byte
	}{"cut at a line's end", func(b []byte) []byte { return b[:bytes.IndexByte(b, '\n')+1] }})
	for _, g := range cuts {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			wh, err := OpenWarehouse(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close()
			er := wh.Eraser()
			recordErasures(t, er, 4)
			path := filepath.Join(dir, stateDirName, erasuresFile)
			garble(t, path, g.fn)
			_, err = er.Erasures(context.Background())
			var de *ErasuresDamagedError
			if !errors.As(err, &de) {
				t.Fatalf("Erasures of a damaged log: %v", err)
			}
			for _, want := range []string{path, "is damaged at line", fmt.Sprintf("truncate -s %d %s", de.Offset, path), "surveysync erase"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error lacks %q: %v", want, err)
				}
			}
		})
	}
}

// An append cut short by a crash is skipped, and the next append starts on
// a line of its own.
func TestTornErasureAppendIsSkipped(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	wh, err := OpenWarehouse(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	er := wh.Eraser()
	recordErasures(t, er, 2)
	path := filepath.Join(dir, stateDirName, erasuresFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"survey_id":3177,"response_id":"0000`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if es, err := er.Erasures(context.Background()); err != nil || len(es) != 2 {
		t.Fatalf("after a torn append: %d erasures, %v", len(es), err)
	}
	e := warehouse.Erasure{ResponseKey: warehouse.ResponseKey{SurveyID: 3177, ResponseID: "11111111-0000-0000-0000-000000000000"},
		Reason: warehouse.ReasonRequest, State: warehouse.ErasureDone, RequestedAt: time.Now().UTC().Truncate(time.Second)}
	if err := er.RecordErasures(context.Background(), []warehouse.Erasure{e}); err != nil {
		t.Fatal(err)
	}
	es, err := er.Erasures(context.Background())
	if err != nil || len(es) != 3 || es[2] != e {
		t.Fatalf("after the next append: %+v, %v", es, err)
	}
	if !strings.Contains(logs.String(), "cut short by a crash") {
		t.Errorf("no warning about the torn line:\n%s", logs.String())
	}
}

// A damaged feed ledger or uploaded-files index is refused (at open, or
// when an entry is read: bbolt does not checksum values) with an error
// naming the file and how to move it aside.
func TestDamagedLedgerAndIndexAreRefused(t *testing.T) {
	ctx := context.Background()
	stores := []struct {
		name string
		fill func(t *testing.T, dir string) string // returns the file's path
		read func(dir string) error                // opens and reads everything
	}{
		{"feed ledger", func(t *testing.T, dir string) string {
			l, err := NewFileLedger(dir)
			if err != nil {
				t.Fatal(err)
			}
			var es []record.ContactEntry
			for i := range 2000 {
				es = append(es, record.ContactEntry{Feed: "f", Key: fmt.Sprintf("key-%05d", i), DistributionID: 7, State: "pushed", ContactID: int64(i), BatchID: "b", UpdatedAt: time.Now()})
			}
			if err := l.RecordContacts(ctx, es); err != nil {
				t.Fatal(err)
			}
			l.Close()
			return filepath.Join(dir, ledgerDBName)
		}, func(dir string) error {
			l, err := NewFileLedger(dir)
			if err != nil {
				return err
			}
			defer l.Close()
			return l.LoadContacts(ctx, "f", func(record.ContactEntry) error { return nil })
		}},
		{"file index", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "uploaded_files.db")
			ix, err := OpenFileIndex(path)
			if err != nil {
				t.Fatal(err)
			}
			var rs []files.Record
			for i := range 2000 {
				rs = append(rs, files.Record{FileRef: files.FileRef{SurveyID: 1, ResponseID: survey.GUID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), QuestionID: 3, FileID: survey.GUID(fmt.Sprintf("10000000-0000-0000-0000-%012d", i))},
					ObjectURL: "file:///x", FileName: "cv.pdf", Size: 3, SHA256: "abc", StoredAt: time.Now(), Version: 1})
			}
			if err := ix.Record(ctx, rs); err != nil {
				t.Fatal(err)
			}
			ix.Close()
			return path
		}, func(dir string) error {
			ix, err := OpenFileIndex(filepath.Join(dir, "uploaded_files.db"))
			if err == nil {
				ix.Close()
			}
			return err
		}},
	}
	for _, st := range stores {
		for _, g := range garblings {
			t.Run(st.name+"/"+g.name, func(t *testing.T) {
				dir := t.TempDir()
				path := st.fill(t, dir)
				if err := st.read(dir); err != nil {
					t.Fatal(err)
				}
				garble(t, path, g.fn)
				err := st.read(dir)
				if err == nil {
					t.Fatal("a damaged file was read without an error")
				}
				for _, want := range []string{path + " is damaged", fmt.Sprintf("mv %s %s.damaged", path, path), "Restore it from a backup"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the error lacks %q: %v", want, err)
					}
				}
			})
		}
	}
}

// A damaged rejects file is moved aside with a warning naming it and what
// is lost; the other files' records are still read.
func TestDamagedRejectsFileIsMovedAside(t *testing.T) {
	for _, g := range garblings {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			wh, err := OpenWarehouse(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close()
			ctx := context.Background()
			at := time.Date(2026, 11, 22, 4, 30, 1, 0, time.UTC)
			for i, id := range []survey.GUID{"0000aaaa-0000-4000-8000-00000000aaaa", "0000bbbb-0000-4000-8000-00000000bbbb"} {
				if err := wh.WriteRejects(ctx, []pipeline.Reject{{SurveyID: 3177, ResponseID: id, Stage: pipeline.StageFetch, Reason: "bad_date",
					Source: "poll", RejectedAt: at.Add(time.Duration(i) * time.Hour), ListedStatus: survey.StatusCompleted}}); err != nil {
					t.Fatal(err)
				}
			}
			paths, _ := filepath.Glob(filepath.Join(dir, rejectsDirName, "*.jsonl"))
			if len(paths) != 2 {
				t.Fatalf("rejects files: %v", paths)
			}
			garble(t, paths[0], g.fn)
			inv := wh.Inventory().(warehouse.RejectInventory)
			got, err := inv.RejectedResponses(ctx, 3177)
			if err != nil || len(got) != 1 {
				t.Fatalf("RejectedResponses with a damaged file: %v, %v; want the other file's response", got, err)
			}
			if aside, _ := filepath.Glob(paths[0] + ".damaged-*"); len(aside) != 1 {
				t.Errorf("moved-aside files: %v", aside)
			}
			for _, want := range []string{"level=WARN", "file=" + paths[0], "lost="} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log lacks %q:\n%s", want, logs.String())
				}
			}
			if got, err := inv.RejectedResponses(ctx, 3177); err != nil || len(got) != 1 {
				t.Errorf("read again: %v, %v", got, err)
			}
		})
	}
}

// CheckLocalState finds each damaged file without changing any: refused
// ones with the fix, the others with what moving them aside costs.
func TestCheckLocalState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wh, err := OpenWarehouse(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	if err := wh.SaveStates(ctx, []pipeline.StreamState{{SurveyID: 1, Stream: pipeline.StreamCompleted, Watermark: t0}}); err != nil {
		t.Fatal(err)
	}
	if err := wh.Privacy().RecordPrivacyRules(ctx, []byte(`{"fields":{}}`)); err != nil {
		t.Fatal(err)
	}
	recordErasures(t, wh.Eraser(), 2)
	l, err := wh.FeedLedger()
	if err != nil || l.RecordContacts(ctx, []record.ContactEntry{{Feed: "f", Key: "k", State: "pushed"}}) != nil {
		t.Fatal(err)
	}
	wh.Close()
	if fs := CheckLocalState(ctx, dir, false); len(fs) != 4 {
		t.Fatalf("found %+v, want 4 sound files", fs)
	} else {
		for _, f := range fs {
			if f.Err != nil || f.InUse {
				t.Errorf("%s: %v", f.Path, f.Err)
			}
		}
	}
	damaged := map[string]bool{}
	for _, name := range []string{"_state/sync_state.json", "_state/privacy.json", "_state/erasures.jsonl", "_feeds/ledger.db"} {
		garble(t, filepath.Join(dir, name), garblings[2].fn)
		damaged[filepath.Join(dir, name)] = true
	}
	before, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	for _, f := range CheckLocalState(ctx, dir, false) {
		if !damaged[f.Path] || f.Err == nil {
			t.Errorf("%s: %v", f.Path, f.Err)
		}
		if f.Refused == strings.HasSuffix(f.Path, "sync_state.json") || !f.Refused && f.Lost == "" {
			t.Errorf("%s: refused %v, lost %q", f.Path, f.Refused, f.Lost)
		}
	}
	if after, _ := filepath.Glob(filepath.Join(dir, "*", "*")); len(after) != len(before) {
		t.Errorf("files changed: %v → %v", before, after)
	}
	for _, f := range CheckLocalState(ctx, dir, true) {
		if strings.HasSuffix(f.Path, ".db") != f.InUse {
			t.Errorf("held: %s in use %v", f.Path, f.InUse)
		}
	}
}

// A damaged verification history is listed as moved aside at start, not
// refused; a line cut short by a crash is no damage.
func TestCheckLocalStateVerifyRuns(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, stateDirName, verifyRunsFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		content string
		damaged bool
	}{
		{"{\"survey_id\":1}\n{\"survey_id\":2,\"str", false},
		{"{\"survey_id\":1}\n\x00\x00\x00\n", true},
	} {
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		fs := CheckLocalState(context.Background(), dir, false)
		if len(fs) != 1 || (fs[0].Err != nil) != c.damaged || fs[0].Refused || fs[0].Lost == "" {
			t.Errorf("%q: %+v", c.content, fs)
		}
	}
}
