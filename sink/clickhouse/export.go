package clickhouse

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/wide"
)

// ExportOptions choose what ExportWideCSV writes.
type ExportOptions struct {
	// Since, when set, keeps the responses whose current version surveysync
	// read at or after it (synced_at): the increment since an earlier
	// export.
	Since time.Time
	// BOM starts the file with a UTF-8 byte order mark, which Excel needs
	// to read UTF-8 (Czech labels) correctly.
	BOM bool
}

// ExportWideCSV writes survey surveyID's wide view (docs/schema.md, "Wide
// tables") to w as CSV (wide.NewCSV): a header of the view's column names,
// then one record per current response, streamed block by block as
// ClickHouse sends them (memory does not grow with the survey). It returns
// the number of records.
func (s *Sink) ExportWideCSV(ctx context.Context, w io.Writer, surveyID int64, o ExportOptions) (int, error) {
	return s.exportWide(ctx, surveyID, o, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewCSV(w, fields, o.BOM)
	})
}

// ExportWideParquet writes survey surveyID's wide view to w as one Parquet
// file (wide.NewParquet: Snappy, row groups of wide.RowGroup rows, typed
// columns), streamed: memory does not grow with the survey. It returns the
// number of rows.
func (s *Sink) ExportWideParquet(ctx context.Context, w io.Writer, surveyID int64, o ExportOptions) (int, error) {
	return s.exportWide(ctx, surveyID, o, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewParquet(w, fields)
	})
}

// ExportTable writes survey surveyID's rows of a long table, "responses"
// (responses_current) or "answers" (answers_current: the answers of the
// current versions), to the writer open returns for the table's fields,
// streamed; Since keeps the responses read at or after it (and their
// answers). It returns the number of rows.
func (s *Sink) ExportTable(ctx context.Context, table string, surveyID int64, o ExportOptions,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	var query string
	args := []any{surveyID}
	switch table {
	case "responses":
		query = "SELECT * FROM " + s.table("responses_current") + " WHERE survey_id = ?"
		if !o.Since.IsZero() {
			query += " AND synced_at >= ?"
			args = append(args, o.Since.UTC().Truncate(time.Second))
		}
	case "answers":
		query = "SELECT * FROM " + s.table("answers_current") + " WHERE survey_id = ?"
		if !o.Since.IsZero() {
			query += " AND response_id IN (SELECT response_id FROM " + s.table("responses_current") +
				" WHERE survey_id = ? AND synced_at >= ?)"
			args = append(args, surveyID, o.Since.UTC().Truncate(time.Second))
		}
	default:
		return 0, fmt.Errorf("clickhouse: export survey %d: table %q: want responses or answers", surveyID, table)
	}
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: export %s of survey %d: %w", table, surveyID, err)
	}
	return exportRows(rows, surveyID, open)
}

func (s *Sink) exportWide(ctx context.Context, surveyID int64, o ExportOptions,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	rows, err := s.wideRows(ctx, surveyID, o)
	if err != nil {
		return 0, err
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

// wideRows queries survey surveyID's wide view for an export.
func (s *Sink) wideRows(ctx context.Context, surveyID int64, o ExportOptions) (driver.Rows, error) {
	query := "SELECT * FROM " + s.table(WideViewName(surveyID))
	var args []any
	if !o.Since.IsZero() {
		query += " WHERE synced_at >= ?"
		args = append(args, o.Since.UTC().Truncate(time.Second))
	}
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	return rows, nil
}

// Exporter returns s: the wide views and the *_current views.
func (s *Sink) Exporter() warehouse.Exporter { return exporter{s} }

// exporter is the Sink seen as a warehouse.Exporter.
type exporter struct{ s *Sink }

// WideColumns reads the survey's rows of wide_columns.
func (e exporter) WideColumns(ctx context.Context, surveyID int64) ([]wide.Column, error) {
	return e.s.WideColumns(ctx, surveyID)
}

// Export reads the survey's wide view (warehouse.ExportWide) or a
// *_current view.
func (e exporter) Export(ctx context.Context, table string, surveyID int64, since time.Time,
	open func([]wide.Field) (wide.Writer, error)) (int, error) {
	o := ExportOptions{Since: since}
	if table == warehouse.ExportWide {
		return e.s.exportWide(ctx, surveyID, o, open)
	}
	return e.s.ExportTable(ctx, table, surveyID, o, open)
}
