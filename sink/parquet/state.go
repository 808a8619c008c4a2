package parquet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline"
)

// State files in <dir>/_state. Each holds every row of its table as JSON
// and is replaced whole on every save (temporary file, fsync, rename, fsync
// folder), so a reader sees the old or the new content, never a mix.
const (
	statesFile  = "sync_state.json"
	surveysFile = "surveys.json"
	fileFormat  = 1
)

type statesDoc struct {
	Format int          `json:"format"`
	States []stateEntry `json:"states"`
}

type stateEntry struct {
	SurveyID  int64     `json:"survey_id"`
	Stream    string    `json:"stream"`
	Watermark time.Time `json:"watermark"`
	LastRunAt time.Time `json:"last_run_at"`
	LastError string    `json:"last_error,omitempty"`
	Synced    int64     `json:"synced"`
	UpdatedAt time.Time `json:"updated_at"`

	CycleStartedAt time.Time `json:"cycle_started_at,omitzero"`
	CycleListed    int64     `json:"cycle_listed,omitempty"`
	CycleDone      int64     `json:"cycle_done,omitempty"`
}

type surveysDoc struct {
	Format  int           `json:"format"`
	Surveys []surveyEntry `json:"surveys"`
}

type surveyEntry struct {
	SurveyID   int64      `json:"survey_id"`
	Name       string     `json:"name"`
	LaunchedAt *time.Time `json:"launched_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	FirstSeen  time.Time  `json:"first_seen"`
	LastSeen   time.Time  `json:"last_seen"`
}

// LoadStates returns every saved stream checkpoint, ordered by survey and
// stream; none when nothing was saved yet.
func (s *Sink) LoadStates(ctx context.Context) ([]pipeline.StreamState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stateOp(ctx); err != nil {
		return nil, err
	}
	doc, err := s.loadStates()
	if err != nil {
		return nil, err
	}
	out := make([]pipeline.StreamState, len(doc.States))
	for i, e := range doc.States {
		out[i] = pipeline.StreamState(e)
	}
	return out, nil
}

// SaveStates upserts the given checkpoints by (survey, stream); the others
// stay as they were. It returns once the file is durable.
func (s *Sink) SaveStates(ctx context.Context, states []pipeline.StreamState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stateOp(ctx); err != nil {
		return err
	}
	doc, err := s.loadStates()
	if err != nil {
		return err
	}
	type key struct {
		survey int64
		stream string
	}
	byKey := make(map[key]int, len(doc.States))
	for i, e := range doc.States {
		byKey[key{e.SurveyID, e.Stream}] = i
	}
	for _, st := range states {
		e := stateEntry(st)
		if i, ok := byKey[key{st.SurveyID, st.Stream}]; ok {
			doc.States[i] = e
			continue
		}
		byKey[key{st.SurveyID, st.Stream}] = len(doc.States)
		doc.States = append(doc.States, e)
	}
	slices.SortFunc(doc.States, func(a, b stateEntry) int {
		return cmp.Or(cmp.Compare(a.SurveyID, b.SurveyID), cmp.Compare(a.Stream, b.Stream))
	})
	doc.Format = fileFormat
	return s.writeJSON(statesFile, doc)
}

// LoadSurveys returns every saved survey, ordered by id.
func (s *Sink) LoadSurveys(ctx context.Context) ([]pipeline.SurveyInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stateOp(ctx); err != nil {
		return nil, err
	}
	doc, err := s.loadSurveys()
	if err != nil {
		return nil, err
	}
	out := make([]pipeline.SurveyInfo, len(doc.Surveys))
	for i, e := range doc.Surveys {
		out[i] = pipeline.SurveyInfo(e)
	}
	return out, nil
}

// SaveSurveys upserts the given surveys by id; the others stay as they
// were. It returns once the file is durable.
func (s *Sink) SaveSurveys(ctx context.Context, surveys []pipeline.SurveyInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stateOp(ctx); err != nil {
		return err
	}
	doc, err := s.loadSurveys()
	if err != nil {
		return err
	}
	byID := make(map[int64]int, len(doc.Surveys))
	for i, e := range doc.Surveys {
		byID[e.SurveyID] = i
	}
	for _, sv := range surveys {
		e := surveyEntry(sv)
		if i, ok := byID[sv.SurveyID]; ok {
			doc.Surveys[i] = e
			continue
		}
		byID[sv.SurveyID] = len(doc.Surveys)
		doc.Surveys = append(doc.Surveys, e)
	}
	slices.SortFunc(doc.Surveys, func(a, b surveyEntry) int { return cmp.Compare(a.SurveyID, b.SurveyID) })
	doc.Format = fileFormat
	return s.writeJSON(surveysFile, doc)
}

// stateOp checks that a state operation may run; s.mu is held.
func (s *Sink) stateOp(ctx context.Context) error {
	if s.closed {
		return errors.New("parquet sink: closed")
	}
	return ctx.Err()
}

func (s *Sink) loadStates() (statesDoc, error) {
	var doc statesDoc
	err := s.readJSON(statesFile, &doc)
	return doc, err
}

func (s *Sink) loadSurveys() (surveysDoc, error) {
	var doc surveysDoc
	err := s.readJSON(surveysFile, &doc)
	return doc, err
}

// readJSON decodes <dir>/_state/name into v; a missing file leaves v as is.
// A file that does not decode (cut short, zero-filled, overwritten) is
// moved aside (setAside) and v left as is: the state is rebuilt by reading
// the service again, whose writes are idempotent, rather than failing
// every start.
func (s *Sink) readJSON(name string, v any) error {
	path := filepath.Join(s.dir, stateDirName, name)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("parquet sink: read %s: %w", path, err)
	}
	if derr := json.Unmarshal(raw, v); derr != nil {
		reflect.ValueOf(v).Elem().SetZero() // a type error leaves it half filled
		return s.setAside(path, len(raw), derr, stateRebuilt[name])
	}
	return nil
}

// stateRebuilt says, per state file, what setting it aside costs.
var stateRebuilt = map[string]string{
	statesFile:  "every survey's streams start again from sync.backfill_from: the responses are read again and written as new versions of the same rows (idempotent); nothing is lost, it costs API calls",
	surveysFile: "the survey names and the surveys learned from webhooks are learned again from the next responses and webhooks; the configured surveys are synced as before",
}

// setAside renames a damaged local file (a state file, a rejects file) to
// <name>.damaged-<UTC time> beside it (kept for a look, never read again)
// and logs what is lost and how it comes back (docs/operations.md,
// "Damaged local state"). A file another reader moved meanwhile is no
// error.
func (s *Sink) setAside(path string, size int, derr error, lost string) error {
	aside := path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Rename(path, aside); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("parquet sink: %s is damaged (%w) and cannot be moved aside: %w; move it away by hand (mv %s %s.damaged), then start again", path, derr, err, path, path)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("parquet sink: move aside %s: %w", path, err)
	}
	s.log.Warn("parquet sink: a local file is damaged (cut short, zero-filled or overwritten): moved aside, surveysync goes on without it",
		"file", path, "moved_to", aside, "bytes", size, "err", derr, "lost", lost)
	return nil
}

// writeJSON replaces <dir>/_state/name with v durably.
func (s *Sink) writeJSON(name string, v any) error {
	dir := filepath.Join(s.dir, stateDirName)
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("parquet sink: encode %s: %w", filepath.Join(dir, name), err)
	}
	return s.writeAtomic(dir, name, append(raw, '\n'))
}

// writeAtomic replaces dir/name with raw durably (internal/atomicfile).
func (s *Sink) writeAtomic(dir, name string, raw []byte) error {
	path := filepath.Join(dir, name)
	if err := atomicfile.MkdirAll(dir); err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	err := atomicfile.Write(path, 0o600, func(f *os.File) error {
		if _, err := f.Write(raw); err != nil {
			return err
		}
		return s.beforeRename(f.Name())
	})
	if err != nil {
		return fmt.Errorf("parquet sink: write %s: %w", path, err)
	}
	return nil
}
