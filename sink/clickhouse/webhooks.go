package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/record"
)

// WebhookLog writes webhook_events (migration 0010).
type WebhookLog struct{ s *Sink }

// NewWebhookLog returns the webhook event log on s.
func NewWebhookLog(s *Sink) *WebhookLog { return &WebhookLog{s: s} }

// LogEvents appends one row per event in one insert. It returns nil
// only once the rows are written. Logging an event again (same event_id)
// adds a row that merges collapse (ReplacingMergeTree(_version)).
func (l *WebhookLog) LogEvents(ctx context.Context, events []record.WebhookEvent) error {
	if len(events) == 0 {
		return nil
	}
	s := l.s
	table := s.table("webhook_events")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (event_id, event_name, survey_id, response_id, received_at, processed_at, outcome, error, attempts, body, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: log webhook events into %s: %w", table, err)
	}
	defer batch.Close()
	for _, e := range events {
		var rid *string
		if e.ResponseID != "" {
			r := e.ResponseID
			rid = &r
		}
		processed := e.ProcessedAt
		if processed.IsZero() {
			processed = time.Now()
		}
		if err := batch.Append(e.EventID, e.EventName, e.SurveyID, rid, e.ReceivedAt.UTC(), processed.UTC(),
			e.Outcome, e.Error, uint32(max(e.Attempts, 0)), e.Body, s.nextVersion()); err != nil {
			return fmt.Errorf("clickhouse: log webhook events into %s: event %s: %w", table, e.EventID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: log webhook events into %s: %w", table, err)
	}
	return nil
}
