package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/wide"
)

// Exporter returns s: the wide views and the *_current views.
func (s *Sink) Exporter() warehouse.Exporter { return exporter{s} }

// exporter is the Sink seen as a warehouse.Exporter.
type exporter struct{ s *Sink }

// WideColumns reads the survey's rows of wide_columns.
func (e exporter) WideColumns(ctx context.Context, surveyID int64) ([]wide.Column, error) {
	return e.s.WideColumns(ctx, surveyID)
}

// Export reads the survey's wide view survey_<id> (warehouse.ExportWide),
// or its rows of responses_current (ExportResponses) or answers_current
// (ExportAnswers: the answers of the current versions), streamed block by
// block as ClickHouse sends them; since keeps the responses read
// (synced_at) at or after it, and their answers.
func (e exporter) Export(ctx context.Context, table string, surveyID int64, since time.Time,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	s := e.s
	since = since.UTC().Truncate(time.Second)
	var query string
	args := []any{surveyID}
	switch table {
	case warehouse.ExportWide:
		query = "SELECT * FROM " + s.table(WideViewName(surveyID))
		args = nil
		if !since.IsZero() {
			query += " WHERE synced_at >= ?"
			args = append(args, since)
		}
	case warehouse.ExportResponses:
		query = "SELECT * FROM " + s.table("responses_current") + " WHERE survey_id = ?"
		if !since.IsZero() {
			query += " AND synced_at >= ?"
			args = append(args, since)
		}
	case warehouse.ExportAnswers:
		query = "SELECT * FROM " + s.table("answers_current") + " WHERE survey_id = ?"
		if !since.IsZero() {
			query += " AND response_id IN (SELECT response_id FROM " + s.table("responses_current") +
				" WHERE survey_id = ? AND synced_at >= ?)"
			args = append(args, surveyID, since)
		}
	default:
		return 0, fmt.Errorf("clickhouse: export survey %d: table %q: want %s, %s or %s",
			surveyID, table, warehouse.ExportWide, warehouse.ExportResponses, warehouse.ExportAnswers)
	}
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: export %s of survey %d: %w", table, surveyID, err)
	}
	return exportRows(rows, surveyID, open)
}

// exportRows writes rows to the writer open returns, and closes rows.
func exportRows(rows driver.Rows, surveyID int64, open func([]wide.Field) (wide.Writer, error)) (int, error) {
	defer rows.Close()
	types := rows.ColumnTypes()
	fields := make([]wide.Field, len(types))
	vals := make([]any, len(types))
	row := make([]any, len(types))
	for i, ct := range types {
		fields[i] = wide.Field{Name: ct.Name(), Type: ct.DatabaseTypeName()}
		vals[i] = reflect.New(ct.ScanType()).Interface()
	}
	fail := func(n int, err error) (int, error) {
		return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	ww, err := open(fields)
	if err != nil {
		return fail(0, err)
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			ww.Close()
			return fail(n, err)
		}
		for i, v := range vals {
			row[i] = reflect.ValueOf(v).Elem().Interface()
		}
		if err := ww.Write(row); err != nil {
			ww.Close()
			return fail(n, err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		ww.Close()
		return fail(n, err)
	}
	if err := ww.Close(); err != nil {
		return fail(n, err)
	}
	return n, nil
}
