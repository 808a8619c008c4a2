package clickhouse

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
)

// The history of verification passes (issue 34): table verify_runs
// (migration 0097), one row per survey × stream and pass, appended.

// VerifyLog returns s: verify_runs.
func (s *Sink) VerifyLog() warehouse.VerifyLog { return s }

// RecordVerifyRuns appends rows to verify_runs.
func (s *Sink) RecordVerifyRuns(ctx context.Context, runs []warehouse.VerifyRun) error {
	if len(runs) == 0 {
		return nil
	}
	table := s.table("verify_runs")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, stream, method, started_at, finished_at, service, warehouse, missing, extra, content, sampled, repaired, result, pass_result, error, api_calls)")
	if err != nil {
		return fmt.Errorf("clickhouse: write verification runs into %s: %w", table, err)
	}
	defer batch.Close()
	for _, r := range runs {
		if err := batch.Append(r.SurveyID, r.Stream, r.Method, r.StartedAt.UTC(), r.FinishedAt.UTC(), r.Service, r.Warehouse,
			r.Missing, r.Extra, r.Content, r.Sampled, r.Repaired, r.Result, r.PassResult, r.Error, r.APICalls); err != nil {
			return fmt.Errorf("clickhouse: write verification runs into %s: survey %d stream %s: %w", table, r.SurveyID, r.Stream, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: write verification runs into %s: %w", table, err)
	}
	return nil
}

// VerifyStates reads the latest row of every survey × stream and each
// survey's latest clean pass.
func (s *Sink) VerifyStates(ctx context.Context) ([]warehouse.VerifyState, error) {
	table := s.table("verify_runs")
	byID := map[int64]*warehouse.VerifyState{}
	rows, err := s.conn.Query(ctx, "SELECT survey_id, stream, method, started_at, finished_at, service, warehouse, missing, extra, content, sampled, repaired, result, pass_result, error, api_calls FROM "+
		table+" ORDER BY survey_id, stream, finished_at DESC LIMIT 1 BY survey_id, stream")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r warehouse.VerifyRun
		if err := rows.Scan(&r.SurveyID, &r.Stream, &r.Method, &r.StartedAt, &r.FinishedAt, &r.Service, &r.Warehouse,
			&r.Missing, &r.Extra, &r.Content, &r.Sampled, &r.Repaired, &r.Result, &r.PassResult, &r.Error, &r.APICalls); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
		}
		st := byID[r.SurveyID]
		if st == nil {
			st = &warehouse.VerifyState{SurveyID: r.SurveyID}
			byID[r.SurveyID] = st
		}
		st.Latest = append(st.Latest, r)
		if r.FinishedAt.After(st.LastPass) {
			st.LastPass, st.Result = r.FinishedAt, r.PassResult
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	rows.Close()
	clean, err := s.conn.Query(ctx, "SELECT survey_id, max(finished_at) FROM "+table+" WHERE pass_result = 'clean' GROUP BY survey_id")
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	defer clean.Close()
	for clean.Next() {
		var id int64
		var t time.Time
		if err := clean.Scan(&id, &t); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
		}
		if st := byID[id]; st != nil {
			st.LastClean = t
		}
	}
	if err := clean.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read %s: %w", table, err)
	}
	out := make([]warehouse.VerifyState, 0, len(byID))
	for _, st := range byID {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SurveyID < out[j].SurveyID })
	return out, nil
}
