package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

// LoadStates returns the latest checkpoint of every stream (table
// sync_state). DateTime columns hold seconds: a watermark comes back
// truncated down to the second, which only means re-reading up to one more
// second of responses.
func (s *Sink) LoadStates(ctx context.Context) ([]pipeline.StreamState, error) {
	query := fmt.Sprintf(`SELECT survey_id, stream,
    argMax(watermark, _version), argMax(last_run_at, _version), argMax(last_error, _version),
    argMax(synced, _version), argMax(updated_at, _version)
FROM %s
GROUP BY survey_id, stream
ORDER BY survey_id, stream`, s.table("sync_state"))
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: load states from %s: %w", s.table("sync_state"), err)
	}
	defer rows.Close()
	var out []pipeline.StreamState
	for rows.Next() {
		var st pipeline.StreamState
		if err := rows.Scan(&st.SurveyID, &st.Stream, &st.Watermark, &st.LastRunAt, &st.LastError, &st.Synced, &st.UpdatedAt); err != nil {
			return nil, fmt.Errorf("clickhouse: load states from %s: %w", s.table("sync_state"), err)
		}
		st.Watermark = st.Watermark.UTC()
		st.LastRunAt = st.LastRunAt.UTC()
		st.UpdatedAt = st.UpdatedAt.UTC()
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: load states from %s: %w", s.table("sync_state"), err)
	}
	if err := s.loadProgress(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// loadProgress fills the cycle progress of states from sync_progress.
func (s *Sink) loadProgress(ctx context.Context, states []pipeline.StreamState) error {
	table := s.table("sync_progress")
	rows, err := s.conn.Query(ctx, fmt.Sprintf(`SELECT survey_id, stream,
    argMax(cycle_started_at, _version), argMax(listed, _version), argMax(done, _version)
FROM %s
GROUP BY survey_id, stream`, table))
	if err != nil {
		return fmt.Errorf("clickhouse: load progress from %s: %w", table, err)
	}
	defer rows.Close()
	type key struct {
		survey int64
		stream string
	}
	idx := make(map[key]int, len(states))
	for i, st := range states {
		idx[key{st.SurveyID, st.Stream}] = i
	}
	for rows.Next() {
		var k key
		var started time.Time
		var listed, done int64
		if err := rows.Scan(&k.survey, &k.stream, &started, &listed, &done); err != nil {
			return fmt.Errorf("clickhouse: load progress from %s: %w", table, err)
		}
		i, ok := idx[k]
		if !ok || started.Unix() <= 0 {
			continue
		}
		states[i].CycleStartedAt = started.UTC()
		states[i].CycleListed, states[i].CycleDone = listed, done
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: load progress from %s: %w", table, err)
	}
	return nil
}

// SaveStates appends one row per state; the newest row of a (survey,
// stream) wins. A zero UpdatedAt is set to now.
func (s *Sink) SaveStates(ctx context.Context, states []pipeline.StreamState) error {
	if len(states) == 0 {
		return nil
	}
	table := s.table("sync_state")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, stream, watermark, last_run_at, last_error, synced, updated_at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: save states into %s: %w", table, err)
	}
	defer batch.Close()
	now := time.Now().UTC()
	for _, st := range states {
		updated := st.UpdatedAt
		if updated.IsZero() {
			updated = now
		}
		if err := batch.Append(st.SurveyID, st.Stream, st.Watermark.UTC(), st.LastRunAt.UTC(), st.LastError,
			st.Synced, updated.UTC(), s.nextVersion()); err != nil {
			return fmt.Errorf("clickhouse: save states into %s: survey %d stream %s: %w", table, st.SurveyID, st.Stream, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: save states into %s: %w", table, err)
	}
	return s.saveProgress(ctx, states, now)
}

// saveProgress appends the cycle progress of states to sync_progress
// (cycle_started_at 1970-01-01 when no cycle runs).
func (s *Sink) saveProgress(ctx context.Context, states []pipeline.StreamState, now time.Time) error {
	table := s.table("sync_progress")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, stream, cycle_started_at, listed, done, updated_at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: save progress into %s: %w", table, err)
	}
	defer batch.Close()
	for _, st := range states {
		started := time.Unix(0, 0).UTC()
		if !st.CycleStartedAt.IsZero() {
			started = st.CycleStartedAt.UTC()
		}
		if err := batch.Append(st.SurveyID, st.Stream, started, st.CycleListed, st.CycleDone, now, s.nextVersion()); err != nil {
			return fmt.Errorf("clickhouse: save progress into %s: survey %d stream %s: %w", table, st.SurveyID, st.Stream, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: save progress into %s: %w", table, err)
	}
	return nil
}

// LoadSurveys returns the latest row of every survey (table surveys).
func (s *Sink) LoadSurveys(ctx context.Context) ([]pipeline.SurveyInfo, error) {
	query := fmt.Sprintf(`SELECT survey_id,
    argMax(name, _version), argMax(launched_at, _version), argMax(ended_at, _version),
    argMax(first_seen, _version), argMax(last_seen, _version)
FROM %s
GROUP BY survey_id
ORDER BY survey_id`, s.table("surveys"))
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: load surveys from %s: %w", s.table("surveys"), err)
	}
	defer rows.Close()
	var out []pipeline.SurveyInfo
	for rows.Next() {
		var si pipeline.SurveyInfo
		if err := rows.Scan(&si.SurveyID, &si.Name, &si.LaunchedAt, &si.EndedAt, &si.FirstSeen, &si.LastSeen); err != nil {
			return nil, fmt.Errorf("clickhouse: load surveys from %s: %w", s.table("surveys"), err)
		}
		si.LaunchedAt = utcPtr(si.LaunchedAt)
		si.EndedAt = utcPtr(si.EndedAt)
		si.FirstSeen = si.FirstSeen.UTC()
		si.LastSeen = si.LastSeen.UTC()
		out = append(out, si)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: load surveys from %s: %w", s.table("surveys"), err)
	}
	return out, nil
}

// SaveSurveys appends one row per survey; the newest row of a survey wins,
// so callers save the whole SurveyInfo they know, not a delta.
func (s *Sink) SaveSurveys(ctx context.Context, surveys []pipeline.SurveyInfo) error {
	if len(surveys) == 0 {
		return nil
	}
	table := s.table("surveys")
	batch, err := s.conn.PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (survey_id, name, launched_at, ended_at, first_seen, last_seen, updated_at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: save surveys into %s: %w", table, err)
	}
	defer batch.Close()
	now := time.Now().UTC()
	for _, si := range surveys {
		if err := batch.Append(si.SurveyID, si.Name, utcPtr(si.LaunchedAt), utcPtr(si.EndedAt),
			si.FirstSeen.UTC(), si.LastSeen.UTC(), now, s.nextVersion()); err != nil {
			return fmt.Errorf("clickhouse: save surveys into %s: survey %d: %w", table, si.SurveyID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: save surveys into %s: %w", table, err)
	}
	return nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
