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
