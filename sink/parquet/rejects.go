package parquet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

// rejectsDirName holds the reject records: <dir>/rejects/*.jsonl.
const rejectsDirName = "rejects"

// rejectEntry is one line of a rejects file; the fields are those of the
// ClickHouse table rejects.
type rejectEntry struct {
	SurveyID   int64     `json:"survey_id"`
	ResponseID string    `json:"response_id"`
	Stage      string    `json:"stage"`
	Reason     string    `json:"reason"`
	Error      string    `json:"error"`
	Source     string    `json:"source"`
	RejectedAt time.Time `json:"rejected_at"`
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
			Error: r.Error, Source: r.Source, RejectedAt: at.UTC(),
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
