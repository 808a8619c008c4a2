package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/surveysync/surveysync/sink/warehouse"
)

// Summarizer returns s: it counts responses_current.
func (s *Sink) Summarizer() warehouse.Summarizer { return s }

// Summary counts responses_current per survey and status, in one query: of
// surveyID, or (0) of every survey with a sync state, named from the
// surveys table. responses_current leaves deletions out, so it does not
// count them, and it takes no sample (More says how to look at the rows).
func (s *Sink) Summary(ctx context.Context, surveyID int64, _ int) (*warehouse.Summary, error) {
	bySurvey := map[int64]*warehouse.SurveyCount{}
	add := func(id int64) {
		if bySurvey[id] == nil {
			bySurvey[id] = &warehouse.SurveyCount{SurveyID: id, ByStatus: map[string]int{}}
		}
	}
	if surveyID != 0 {
		add(surveyID)
	} else {
		states, err := s.LoadStates(ctx)
		if err != nil {
			return nil, err
		}
		for _, st := range states {
			add(st.SurveyID)
		}
	}
	// The names are a courtesy: a survey the surveys table lacks (or a
	// failed read) is counted unnamed.
	if surveys, err := s.LoadSurveys(ctx); err == nil {
		for _, sv := range surveys {
			if sc := bySurvey[sv.SurveyID]; sc != nil {
				sc.Name = sv.Name
			}
		}
	}
	sum := &warehouse.Summary{
		About: s.String(),
		More:  "clickhouse-client --query 'SELECT * FROM " + s.table("responses_current") + " LIMIT 5'",
	}
	if len(bySurvey) > 0 {
		ids := make([]string, 0, len(bySurvey))
		for id := range bySurvey {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
		q := "SELECT survey_id, response_status, count() FROM " + s.table("responses_current") +
			" WHERE survey_id IN (" + strings.Join(ids, ", ") + ") GROUP BY survey_id, response_status"
		rows, err := s.conn.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: count current responses: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id     int64
				status string
				n      uint64
			)
			if err := rows.Scan(&id, &status, &n); err != nil {
				return nil, fmt.Errorf("clickhouse: count current responses: %w", err)
			}
			sc := bySurvey[id]
			sc.ByStatus[status] += int(n)
			sc.Current += int(n)
			sum.Total += int(n)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("clickhouse: count current responses: %w", err)
		}
	}
	for _, sc := range bySurvey {
		sum.Surveys = append(sum.Surveys, *sc)
	}
	sort.Slice(sum.Surveys, func(i, j int) bool { return sum.Surveys[i].SurveyID < sum.Surveys[j].SurveyID })
	return sum, nil
}
