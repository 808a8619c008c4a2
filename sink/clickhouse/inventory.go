package clickhouse

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/survey"
)

// CurrentResponseIDs returns the ids of a survey's responses that the
// warehouse shows as current (latest version, not deleted). The poller's
// reconcile pass compares them with the service's lists.
func (s *Sink) CurrentResponseIDs(ctx context.Context, surveyID int64) ([]survey.GUID, error) {
	q := fmt.Sprintf("SELECT toString(response_id) FROM %s.responses_current WHERE survey_id = %d", s.Database(), surveyID)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read current response ids of survey %d: %w", surveyID, err)
	}
	defer rows.Close()
	var out []survey.GUID
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("clickhouse: read current response ids of survey %d: %w", surveyID, err)
		}
		out = append(out, survey.GUID(id))
	}
	return out, rows.Err()
}
