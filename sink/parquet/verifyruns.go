package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// verifyRunsFile is the history of verification passes under _state
// (issue 34): one JSON line per survey × stream and pass, appended. It is
// history only: a damaged file is moved aside (setAside) and a new one
// started, nothing else depends on it.
const verifyRunsFile = "verify_runs.jsonl"

type verifyRunEntry struct {
	SurveyID   int64     `json:"survey_id"`
	Stream     string    `json:"stream"`
	Method     string    `json:"method"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Service    int64     `json:"service"`
	Warehouse  int64     `json:"warehouse"`
	Missing    int64     `json:"missing"`
	Extra      int64     `json:"extra"`
	Content    int64     `json:"content"`
	Sampled    int64     `json:"sampled"`
	Repaired   int64     `json:"repaired"`
	Result     string    `json:"result"`
	PassResult string    `json:"pass_result"`
	Error      string    `json:"error,omitempty"`
	APICalls   int64     `json:"api_calls"`
}

// VerifyLog returns w: _state/verify_runs.jsonl.
func (w *dirWarehouse) VerifyLog() warehouse.VerifyLog { return w }

// RecordVerifyRuns appends rows to _state/verify_runs.jsonl and fsyncs it.
func (w *dirWarehouse) RecordVerifyRuns(_ context.Context, runs []warehouse.VerifyRun) error {
	if len(runs) == 0 {
		return nil
	}
	var raw []byte
	for _, r := range runs {
		line, err := json.Marshal(verifyRunEntry(r))
		if err != nil {
			return fmt.Errorf("parquet sink: encode a verification run of survey %d: %w", r.SurveyID, err)
		}
		raw = append(append(raw, line...), '\n')
	}
	dir := filepath.Join(w.dir, stateDirName)
	if err := atomicfile.MkdirAll(dir); err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	path := filepath.Join(dir, verifyRunsFile)
	w.verifyMu.Lock()
	defer w.verifyMu.Unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	// After an append cut short by a crash, the next line starts on a line
	// of its own: the torn one stays unreadable alone (VerifyStates skips it).
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			raw = append([]byte("\n"), raw...)
		}
	}
	if _, err := f.Write(raw); err != nil {
		_ = f.Close()
		return fmt.Errorf("parquet sink: append to %s: %w", path, err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("parquet sink: sync %s: %w", path, err)
	}
	return atomicfile.SyncDir(dir)
}

// verifyRunsLost is what moving a damaged verification history aside costs.
const verifyRunsLost = "the history of verification passes (kept in the moved file); the next passes start a new one, and status shows no clean pass until one runs"

// VerifyStates reads _state/verify_runs.jsonl: per survey the latest row of
// each stream and the latest clean pass. A line cut short by a crash while
// it was appended is skipped; any other damage (zeros, noise, a hand edit)
// moves the file aside with a WARN (docs/operations.md, "Damaged local
// state") and the history starts again empty.
func (w *dirWarehouse) VerifyStates(context.Context) ([]warehouse.VerifyState, error) {
	path := filepath.Join(w.dir, stateDirName, verifyRunsFile)
	w.verifyMu.Lock()
	defer w.verifyMu.Unlock()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet sink: %w", err)
	}
	type streamKey struct {
		survey int64
		stream string
	}
	latest := map[streamKey]warehouse.VerifyRun{}
	byID := map[int64]*warehouse.VerifyState{}
	offset := 0
	for n := 1; offset < len(raw); n++ {
		line, rest, _ := bytes.Cut(raw[offset:], []byte("\n"))
		offset = len(raw) - len(rest)
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e verifyRunEntry
		if err := json.Unmarshal(line, &e); err != nil {
			if tornJSON(line) {
				w.log.Warn("parquet sink: skipped a line of the verification history cut short by a crash while it was appended", "path", path, "line", n)
				continue
			}
			err = fmt.Errorf("line %d: %w", n, err)
			return nil, w.setAside(path, len(raw), err, verifyRunsLost)
		}
		r := warehouse.VerifyRun(e)
		st := byID[r.SurveyID]
		if st == nil {
			st = &warehouse.VerifyState{SurveyID: r.SurveyID}
			byID[r.SurveyID] = st
		}
		if !r.FinishedAt.Before(st.LastPass) {
			st.LastPass, st.Result = r.FinishedAt, r.PassResult
		}
		if r.PassResult == warehouse.VerifyClean && r.FinishedAt.After(st.LastClean) {
			st.LastClean = r.FinishedAt
		}
		k := streamKey{r.SurveyID, r.Stream}
		if prev, ok := latest[k]; !ok || !r.FinishedAt.Before(prev.FinishedAt) {
			latest[k] = r
		}
	}
	for _, r := range latest {
		byID[r.SurveyID].Latest = append(byID[r.SurveyID].Latest, r)
	}
	out := make([]warehouse.VerifyState, 0, len(byID))
	for _, st := range byID {
		sort.Slice(st.Latest, func(i, j int) bool { return st.Latest[i].Stream < st.Latest[j].Stream })
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SurveyID < out[j].SurveyID })
	return out, nil
}
