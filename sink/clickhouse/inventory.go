package clickhouse

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/surveysync/surveysync/survey"
)

// CurrentResponses returns the ids and statuses of a survey's responses that
// the warehouse shows as current (latest version, not deleted). The poller's
// reconcile pass compares them with the service's lists.
func (s *Sink) CurrentResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error) {
	q := fmt.Sprintf("SELECT toString(response_id), response_status FROM %s.responses_current WHERE survey_id = %d", s.Database(), surveyID)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read current response ids of survey %d: %w", surveyID, err)
	}
	defer rows.Close()
	out := map[survey.GUID]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, fmt.Errorf("clickhouse: read current response ids of survey %d: %w", surveyID, err)
		}
		out[survey.GUID(id)] = status
	}
	return out, rows.Err()
}

// HasResponse reports whether a response is in responses_current (written,
// and its latest version not a deletion): one point query, for a webhook
// whose response answered 404 — a deletion is written only for a response
// the warehouse has.
func (s *Sink) HasResponse(ctx context.Context, surveyID int64, id survey.GUID) (bool, error) {
	u, err := uuid.Parse(string(id)) // parsed, so the literal below is a plain UUID
	if err != nil {
		return false, fmt.Errorf("clickhouse: look up response %q: %w", id, err)
	}
	q := fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE survey_id = %d AND response_id = toUUID('%s')", s.Database(), surveyID, u.String())
	var n uint64
	if err := s.conn.QueryRow(ctx, q).Scan(&n); err != nil {
		return false, fmt.Errorf("clickhouse: look up response %s of survey %d: %w", u, surveyID, err)
	}
	return n > 0, nil
}
