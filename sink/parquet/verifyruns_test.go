package parquet

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/surveysync/surveysync/sink/warehouse"
)

func verifyRuns(at time.Time, pass string, missing int64) []warehouse.VerifyRun {
	var out []warehouse.VerifyRun
	for _, st := range []string{"completed", "partial"} {
		r := warehouse.VerifyRun{SurveyID: 4574, Stream: st, Method: warehouse.VerifyCounts, StartedAt: at.Add(-time.Second), FinishedAt: at,
			Service: 10, Warehouse: 10, Result: warehouse.VerifyClean, PassResult: pass, APICalls: 3}
		if st == "completed" && missing > 0 {
			r.Missing, r.Warehouse, r.Result = missing, 10-missing, warehouse.VerifyDrift
		}
		out = append(out, r)
	}
	return out
}

// The history keeps every pass; VerifyStates gives the latest row of each
// stream and the latest clean pass.
func TestVerifyRunsHistory(t *testing.T) {
	dir := t.TempDir()
	wh, err := OpenWarehouse(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	ctx := context.Background()
	log := wh.VerifyLog()
	if sts, err := log.VerifyStates(ctx); err != nil || len(sts) != 0 {
		t.Fatalf("no history yet: %v, %v", sts, err)
	}
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for i, pass := range []struct {
		result  string
		missing int64
	}{{warehouse.VerifyClean, 0}, {warehouse.VerifyDrift, 3}} {
		if err := log.RecordVerifyRuns(ctx, verifyRuns(t0.Add(time.Duration(i)*time.Hour), pass.result, pass.missing)); err != nil {
			t.Fatal(err)
		}
	}
	sts, err := log.VerifyStates(ctx)
	if err != nil || len(sts) != 1 {
		t.Fatalf("states: %v, %v", sts, err)
	}
	st := sts[0]
	if !st.LastClean.Equal(t0) || !st.LastPass.Equal(t0.Add(time.Hour)) || st.Result != warehouse.VerifyDrift || len(st.Latest) != 2 {
		t.Fatalf("state: %+v", st)
	}
	if st.Latest[0].Stream != "completed" || st.Latest[0].Missing != 3 || st.Latest[1].Missing != 0 {
		t.Errorf("latest rows: %+v", st.Latest)
	}
}

// A line cut short by a crash while it was appended is skipped; other
// damage moves the file aside with a WARN (a recovered file: it is history
// only), and the next pass starts a new one.
func TestDamagedVerifyRunsAreMovedAside(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	torn := struct {
		name string
		fn   func([]byte) []byte
	}{"torn last line", func(b []byte) []byte { return b[:len(b)-20] }}
	for _, g := range append(garblings[:len(garblings):len(garblings)], torn) {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			var logs bytes.Buffer
			wh, err := OpenWarehouse(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer wh.Close()
			ctx := context.Background()
			vl := wh.VerifyLog()
			for i := range 4 {
				if err := vl.RecordVerifyRuns(ctx, verifyRuns(t0.Add(time.Duration(i)*time.Hour), warehouse.VerifyClean, 0)); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, stateDirName, verifyRunsFile)
			garble(t, path, g.fn)
			sts, err := vl.VerifyStates(ctx)
			if err != nil {
				t.Fatalf("VerifyStates of a damaged file: %v", err)
			}
			_, statErr := os.Stat(path)
			switch g.name {
			case "cut in half":
				// The lines before the cut are kept (a torn last line is
				// skipped).
				if len(sts) != 1 || statErr != nil || !sts[0].LastPass.Before(t0.Add(3*time.Hour)) {
					t.Fatalf("torn tail: states %v, file %v, log %s", sts, statErr, logs.String())
				}
			case "torn last line":
				if len(sts) != 1 || statErr != nil || !strings.Contains(logs.String(), "cut short by a crash") {
					t.Fatalf("torn tail: states %v, file %v, log %s", sts, statErr, logs.String())
				}
			default:
				aside, _ := filepath.Glob(path + ".damaged-*")
				if len(sts) != 0 || !os.IsNotExist(statErr) || len(aside) != 1 || !strings.Contains(logs.String(), "a local file is damaged") {
					t.Fatalf("damaged: states %v, file %v, aside %v, log %s", sts, statErr, aside, logs.String())
				}
			}
			// The next pass appends, on a line of its own.
			if err := vl.RecordVerifyRuns(ctx, verifyRuns(t0.Add(9*time.Hour), warehouse.VerifyClean, 0)); err != nil {
				t.Fatal(err)
			}
			sts, err = vl.VerifyStates(ctx)
			if err != nil || len(sts) != 1 || !sts[0].LastClean.Equal(t0.Add(9*time.Hour)) {
				t.Fatalf("after the next pass: %v, %v", sts, err)
			}
		})
	}
}
