package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

// WriteRejects appends the pipeline's reject records to table rejects
// (migration 0045) in one insert; it returns nil only once ClickHouse
// acknowledged it. It implements pipeline.RejectStore. A retried insert of
// the same records collapses in merges (ReplacingMergeTree).
func (s *Sink) WriteRejects(ctx context.Context, rejects []pipeline.Reject) error {
	if len(rejects) == 0 {
		return nil
	}
	table := s.table("rejects")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, response_id, stage, reason, error, source, rejected_at)")
	if err != nil {
		return fmt.Errorf("clickhouse: write rejects into %s: %w", table, err)
	}
	defer batch.Close()
	for _, r := range rejects {
		at := r.RejectedAt
		if at.IsZero() {
			at = time.Now()
		}
		if err := batch.Append(r.SurveyID, string(r.ResponseID), r.Stage, r.Reason, r.Error, r.Source, at.UTC()); err != nil {
			return fmt.Errorf("clickhouse: write rejects into %s: response %s: %w", table, r.ResponseID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: write rejects into %s: %w", table, err)
	}
	return nil
}
