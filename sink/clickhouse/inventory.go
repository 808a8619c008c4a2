package clickhouse

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/survey"
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
