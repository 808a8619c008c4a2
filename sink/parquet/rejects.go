package parquet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// rejectsDirName holds the reject records: <dir>/rejects/*.jsonl.
const rejectsDirName = "rejects"

// rejectEntry is one line of a rejects file; the fields are those of the
// ClickHouse table rejects.
type rejectEntry struct {
	SurveyID   int64  `json:"survey_id"`
	ResponseID string `json:"response_id"`
	Stage      string `json:"stage"`
	Reason     string `json:"reason"`
	Error      string `json:"error"`
	Source     string `json:"source"`
	// ListedStatus: the status of the list that showed the response
	// (absent when none did, and in files written before it existed).
	ListedStatus string    `json:"listed_status,omitempty"`
	RejectedAt   time.Time `json:"rejected_at"`
}

// WriteRejects writes the records as one new JSON Lines file,
// <dir>/rejects/rejects-<time>-<hash>.jsonl, one object per line, and
// returns once it is durable (temporary file, fsync, rename, fsync folder:
// a reader never sees a partial file). The name is derived from the
// content, so writing the same records again replaces the same file. It
// implements pipeline.RejectStore.
func (s *Sink) WriteRejects(ctx context.Context, rejects []pipeline.Reject) error {
	if len(rejects) == 0 {
		return nil
	}
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var raw []byte
	for _, r := range rejects {
		at := r.RejectedAt
		if at.IsZero() {
			at = time.Now()
		}
		line, err := json.Marshal(rejectEntry{
			SurveyID: r.SurveyID, ResponseID: string(r.ResponseID), Stage: r.Stage, Reason: r.Reason,
			Error: r.Error, Source: r.Source, ListedStatus: r.ListedStatus, RejectedAt: at.UTC(),
		})
		if err != nil {
			return fmt.Errorf("parquet sink: encode reject of response %s: %w", r.ResponseID, err)
		}
		raw = append(append(raw, line...), '\n')
	}
	sum := sha256.Sum256(raw)
	at := rejects[0].RejectedAt.UTC()
	if at.IsZero() {
		at = time.Now().UTC()
	}
	name := "rejects-" + at.Format("20060102T150405Z") + "-" + hex.EncodeToString(sum[:6]) + ".jsonl"
	return s.writeAtomic(filepath.Join(s.dir, rejectsDirName), name, raw)
}

// rejectsLost is what moving a damaged rejects file aside costs.
const rejectsLost = "the reject records in it (kept in the moved file): a response it names is no longer listed as rejected, and is read again at most once and rejected again (a new record)"

// rejectEntries decodes a rejects file; an error when a line does not
// decode.
func rejectEntries(raw []byte) ([]rejectEntry, error) {
	var out []rejectEntry
	n := 0
	for line := range bytes.Lines(raw) {
		n++
		var e rejectEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// RejectedResponses returns the responses of a survey rejected when a list
// showed them and not written since, each with the status of that list
// (the latest reject's): the poller holds them as rejected, so that after a
// restart an unchanged one is not read again (issue 19). It reads every
// rejects file and the survey's responses files; a response whose latest
// written version (a deletion too) is not older than its latest reject is
// not returned: the write wins.
func (w *dirWarehouse) RejectedResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error) {
	files, err := filepath.Glob(filepath.Join(w.dir, rejectsDirName, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	type rej struct {
		status string
		at     time.Time
	}
	found := map[string]rej{}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // replaced meanwhile by a retried write of the same records
			}
			return nil, fmt.Errorf("parquet sink: read rejects: %w", err)
		}
		entries, derr := rejectEntries(raw)
		if derr != nil {
			// Written whole (temporary file, rename): damage from outside.
			// The records are what is lost, not a response.
			if err := w.setAside(f, len(raw), derr, rejectsLost); err != nil {
				return nil, err
			}
			continue
		}
		for _, e := range entries {
			if e.SurveyID != surveyID || e.ListedStatus == "" {
				continue
			}
			id := strings.ToLower(e.ResponseID)
			if r, ok := found[id]; !ok || !e.RejectedAt.Before(r.at) {
				found[id] = rej{e.ListedStatus, e.RejectedAt}
			}
		}
	}
	out := make(map[survey.GUID]string, len(found))
	if len(found) == 0 {
		return out, nil
	}
	cur, err := ReadCurrent(ctx, w.dir, surveyID)
	if err != nil {
		return nil, fmt.Errorf("parquet sink: read current responses of survey %d: %w", surveyID, err)
	}
	for id, r := range found {
		if c, ok := cur.Responses[id]; ok && c.Version >= uint64(r.at.UnixNano()) {
			continue
		}
		out[survey.GUID(id)] = r.status
	}
	return out, nil
}
