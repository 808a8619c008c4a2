package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Verifier reads responses_current and answers_current for verification.
func (s *Sink) Verifier() warehouse.VerifyReader { return verifyReader{s} }

type verifyReader struct{ s *Sink }

// where is the WHERE clause of r on responses_current. Statuses come from
// the engine (stream names), but are quoted all the same.
func (v verifyReader) where(r warehouse.Range) string {
	date := "toUInt32(ifNull(date_completed, date_created))"
	if r.Started {
		date = "toUInt32(date_created)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "survey_id = %d", r.SurveyID)
	qs := make([]string, len(r.Statuses))
	for i, st := range r.Statuses {
		qs[i] = quoteString(st)
	}
	fmt.Fprintf(&b, " AND response_status IN (%s)", strings.Join(qs, ", "))
	if !r.From.IsZero() {
		fmt.Fprintf(&b, " AND %s >= %d", date, unixSec(r.From))
	}
	if !r.To.IsZero() {
		fmt.Fprintf(&b, " AND %s < %d", date, unixSec(r.To))
	}
	return b.String()
}

// unixSec is t's second, at least 0 (DateTime starts at the epoch).
func unixSec(t time.Time) int64 { return max(t.Unix(), 0) }

func (v verifyReader) Count(ctx context.Context, r warehouse.Range) (warehouse.RangeCount, error) {
	date := "toUInt32(ifNull(date_completed, date_created))"
	if r.Started {
		date = "toUInt32(date_created)"
	}
	q := fmt.Sprintf("SELECT count(), toUInt32(quantileExact(0.5)(%s)) FROM %s.responses_current WHERE %s",
		date, v.s.Database(), v.where(r))
	var n uint64
	var mid uint32
	if err := v.s.conn.QueryRow(ctx, q).Scan(&n, &mid); err != nil {
		return warehouse.RangeCount{}, fmt.Errorf("clickhouse: count current responses of survey %d: %w", r.SurveyID, err)
	}
	out := warehouse.RangeCount{N: int64(n)}
	if n > 0 {
		out.Mid = time.Unix(int64(mid), 0).UTC()
	}
	return out, nil
}

func (v verifyReader) IDs(ctx context.Context, r warehouse.Range) (map[survey.GUID]string, error) {
	q := fmt.Sprintf("SELECT toString(response_id), response_status FROM %s.responses_current WHERE %s", v.s.Database(), v.where(r))
	return v.idStatus(ctx, q, r.SurveyID)
}

func (v verifyReader) idStatus(ctx context.Context, q string, surveyID int64) (map[survey.GUID]string, error) {
	rows, err := v.s.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read current responses of survey %d: %w", surveyID, err)
	}
	defer rows.Close()
	out := map[survey.GUID]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, fmt.Errorf("clickhouse: read current responses of survey %d: %w", surveyID, err)
		}
		out[survey.GUID(id)] = status
	}
	return out, rows.Err()
}

func (v verifyReader) Sample(ctx context.Context, surveyID int64, n int) ([]survey.GUID, error) {
	if n <= 0 {
		return nil, nil
	}
	q := fmt.Sprintf("SELECT toString(response_id), response_status FROM %s.responses_current WHERE survey_id = %d ORDER BY rand() LIMIT %d",
		v.s.Database(), surveyID, n)
	m, err := v.idStatus(ctx, q, surveyID)
	if err != nil {
		return nil, err
	}
	out := make([]survey.GUID, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	return out, nil
}

// Content reads the responses' current rows, a thousand ids a query.
func (v verifyReader) Content(ctx context.Context, surveyID int64, ids []survey.GUID) (map[survey.GUID]warehouse.Content, error) {
	out := make(map[survey.GUID]warehouse.Content, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		if err := v.content(ctx, surveyID, ids[:n], out); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

func (v verifyReader) content(ctx context.Context, surveyID int64, ids []survey.GUID, out map[survey.GUID]warehouse.Content) error {
	lits := make([]string, len(ids))
	for i, id := range ids {
		u, err := uuid.Parse(string(id)) // parsed, so the literal is a plain UUID
		if err != nil {
			return fmt.Errorf("clickhouse: read response %q: %w", id, err)
		}
		lits[i] = "toUUID('" + u.String() + "')"
	}
	in := strings.Join(lits, ", ")
	fail := func(err error) error {
		return fmt.Errorf("clickhouse: read current rows of %d responses of survey %d: %w", len(ids), surveyID, err)
	}
	q := fmt.Sprintf("SELECT toString(response_id), response_status, toUInt32(date_created), toUInt32(ifNull(date_completed, toDateTime(0))), isNull(date_completed) "+
		"FROM %s.responses_current WHERE survey_id = %d AND response_id IN (%s)", v.s.Database(), surveyID, in)
	rows, err := v.s.conn.Query(ctx, q)
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var id, status string
		var created, completed uint32
		var null uint8
		if err := rows.Scan(&id, &status, &created, &completed, &null); err != nil {
			rows.Close()
			return fail(err)
		}
		c := warehouse.Content{Status: status, Created: time.Unix(int64(created), 0).UTC()}
		if null == 0 {
			c.Completed = time.Unix(int64(completed), 0).UTC()
		}
		out[survey.GUID(id)] = c
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	q = fmt.Sprintf("SELECT toString(response_id), page_id, question_id, row_id, column_id, choice_id, other_id, value, text "+
		"FROM %s.answers_current WHERE survey_id = %d AND response_id IN (%s) ORDER BY response_id, page_index, question_index, answer_index",
		v.s.Database(), surveyID, in)
	rows, err = v.s.conn.Query(ctx, q)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, text string
		var a warehouse.Answer
		var row, col, choice, other, value *int64
		if err := rows.Scan(&id, &a.PageID, &a.QuestionID, &row, &col, &choice, &other, &value, &text); err != nil {
			return fail(err)
		}
		c, ok := out[survey.GUID(id)]
		if !ok {
			continue
		}
		a.RowID, a.ColumnID, a.ChoiceID, a.OtherID, a.Value, a.Text = warehouse.Opt(row), warehouse.Opt(col), warehouse.Opt(choice), warehouse.Opt(other), warehouse.Opt(value), text
		c.Answers = append(c.Answers, a)
		out[survey.GUID(id)] = c
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return nil
}
