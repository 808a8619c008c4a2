package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// WriteRejects appends the pipeline's reject records to table rejects
// (migrations 0045 and 0093) in one insert; it returns nil only once ClickHouse
// acknowledged it. It implements pipeline.RejectStore. A retried insert of
// the same records collapses in merges (ReplacingMergeTree).
func (s *Sink) WriteRejects(ctx context.Context, rejects []pipeline.Reject) error {
	if len(rejects) == 0 {
		return nil
	}
	table := s.table("rejects")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, response_id, stage, reason, error, source, listed_status, rejected_at)")
	if err != nil {
		return fmt.Errorf("clickhouse: write rejects into %s: %w", table, err)
	}
	defer batch.Close()
	for _, r := range rejects {
		at := r.RejectedAt
		if at.IsZero() {
			at = time.Now()
		}
		if err := batch.Append(r.SurveyID, string(r.ResponseID), r.Stage, r.Reason, r.Error, r.Source, r.ListedStatus, at.UTC()); err != nil {
			return fmt.Errorf("clickhouse: write rejects into %s: response %s: %w", table, r.ResponseID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: write rejects into %s: %w", table, err)
	}
	return nil
}

// RejectedResponses returns the responses of a survey rejected when a list
// showed them and not written since, each with the status of that list
// (the latest reject's): the poller holds them as rejected, so that after a
// restart an unchanged one is not read again (issue 19). A response whose
// latest written version (a deletion too) is from the same second as its
// latest reject or later is not returned: the write wins.
func (s *Sink) RejectedResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error) {
	rejects := s.table("rejects")
	// Grouped by the lower-case id: a list may name a response in either
	// case.
	q := fmt.Sprintf("SELECT lower(response_id) AS id, argMax(listed_status, rejected_at), toUInt32(max(rejected_at)) FROM %s "+
		"WHERE survey_id = %d AND listed_status != '' GROUP BY id", rejects, surveyID)
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read rejected responses of survey %d: %w", surveyID, err)
	}
	type rej struct {
		status string
		at     uint32
	}
	found := map[string]rej{}
	for rows.Next() {
		var id, status string
		var at uint32
		if err := rows.Scan(&id, &status, &at); err != nil {
			rows.Close()
			return nil, fmt.Errorf("clickhouse: read rejected responses of survey %d: %w", surveyID, err)
		}
		found[strings.ToLower(id)] = rej{status, at}
	}
	err = rows.Err()
	rows.Close()
	if err != nil || len(found) == 0 {
		return map[survey.GUID]string{}, err
	}
	// The latest write of each (GLOBAL IN: on a cluster both tables are
	// Distributed; on a single server it is a plain IN).
	q = fmt.Sprintf("SELECT toString(response_id), toUInt32(intDiv(max(_version), 1000000000)) FROM %s "+
		"WHERE survey_id = %d AND toString(response_id) GLOBAL IN (SELECT lower(response_id) FROM %s WHERE survey_id = %d AND listed_status != '') "+
		"GROUP BY response_id", s.table("responses"), surveyID, rejects, surveyID)
	rows, err = s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read rejected responses of survey %d: latest writes: %w", surveyID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var at uint32
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("clickhouse: read rejected responses of survey %d: latest writes: %w", surveyID, err)
		}
		if r, ok := found[id]; ok && at >= r.at {
			delete(found, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read rejected responses of survey %d: latest writes: %w", surveyID, err)
	}
	out := make(map[survey.GUID]string, len(found))
	for id, r := range found {
		out[survey.GUID(id)] = r.status
	}
	return out, nil
}
