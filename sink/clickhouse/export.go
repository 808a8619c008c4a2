package clickhouse

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
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
// tables") to w as CSV: a header of the view's column names, then one
// record per current response, streamed block by block as ClickHouse sends
// them (memory does not grow with the survey). Values: text as is; numbers
// in decimal; NULL as an empty field; times as 2006-01-02 15:04:05 (UTC);
// arrays (multiple choice, matrix rows with several answers, file ids, URL
// parameters) as JSON arrays of strings. It returns the number of records.
func (s *Sink) ExportWideCSV(ctx context.Context, w io.Writer, surveyID int64, o ExportOptions) (int, error) {
	query := "SELECT * FROM " + s.table(WideViewName(surveyID))
	var args []any
	if !o.Since.IsZero() {
		query += " WHERE synced_at >= ?"
		args = append(args, o.Since.UTC().Truncate(time.Second))
	}
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	defer rows.Close()
	bw := bufio.NewWriterSize(w, 64<<10)
	if o.BOM {
		if _, err := bw.WriteString("\ufeff"); err != nil {
			return 0, err
		}
	}
	cw := csv.NewWriter(bw)
	types := rows.ColumnTypes()
	header := make([]string, len(types))
	vals := make([]any, len(types))
	for i, ct := range types {
		header[i] = ct.Name()
		vals[i] = reflect.New(ct.ScanType()).Interface()
	}
	if err := cw.Write(header); err != nil {
		return 0, err
	}
	rec := make([]string, len(types))
	n := 0
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
		}
		for i, v := range vals {
			rec[i] = csvValue(reflect.ValueOf(v).Elem())
		}
		if err := cw.Write(rec); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// csvValue formats one scanned value for CSV.
func csvValue(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case string:
		return x
	case time.Time:
		return x.UTC().Format(time.DateTime)
	case uuid.UUID:
		return x.String()
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case []string:
		if len(x) == 0 {
			return "[]"
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		return strings.TrimSuffix(b.String(), "\n")
	}
	return fmt.Sprint(v.Interface())
}
