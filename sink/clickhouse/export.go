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

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
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
	rows, err := s.wideRows(ctx, surveyID, o)
	if err != nil {
		return 0, err
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

// exportRowGroup is the number of rows per Parquet row group (and Arrow
// record) an export builds before writing it.
const exportRowGroup = 16384

// arrowType is the Arrow type of a wide view's column in a Parquet export.
func arrowType(chType string) (arrow.DataType, bool) {
	nullable := strings.HasPrefix(chType, "Nullable(")
	base := strings.TrimSuffix(strings.TrimPrefix(chType, "Nullable("), ")")
	if !nullable {
		base = chType
	}
	switch {
	case base == "Int64":
		return arrow.PrimitiveTypes.Int64, nullable
	case base == "UInt64":
		return arrow.PrimitiveTypes.Uint64, nullable
	case strings.HasPrefix(base, "DateTime"):
		return &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, nullable
	case base == "Array(String)":
		return arrow.ListOf(arrow.BinaryTypes.String), false
	}
	return arrow.BinaryTypes.String, nullable // String, UUID, anything else as text
}

// ExportWideParquet writes survey surveyID's wide view to w as one Parquet
// file (Snappy), streamed: rows are turned into Arrow records of
// exportRowGroup rows, each written as a row group, so memory does not grow
// with the survey. Types: String and UUID as strings, Int64 and Nullable
// as (nullable) int64, times as UTC timestamps in seconds, arrays as lists
// of strings. It returns the number of rows.
func (s *Sink) ExportWideParquet(ctx context.Context, w io.Writer, surveyID int64, o ExportOptions) (int, error) {
	rows, err := s.wideRows(ctx, surveyID, o)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	fields := make([]arrow.Field, len(types))
	vals := make([]any, len(types))
	for i, ct := range types {
		t, nullable := arrowType(ct.DatabaseTypeName())
		fields[i] = arrow.Field{Name: ct.Name(), Type: t, Nullable: nullable}
		vals[i] = reflect.New(ct.ScanType()).Interface()
	}
	schema := arrow.NewSchema(fields, nil)
	mem := memory.NewGoAllocator()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithAllocator(mem),
		parquet.WithCreatedBy("surveysync"))
	pw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		return 0, err
	}
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	n, pending := 0, 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		rec := rb.NewRecordBatch()
		defer rec.Release()
		pending = 0
		return pw.Write(rec)
	}
	fail := func(err error) (int, error) {
		pw.Close()
		return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			return fail(err)
		}
		for i, v := range vals {
			appendArrow(rb.Field(i), reflect.ValueOf(v).Elem())
		}
		n++
		if pending++; pending == exportRowGroup {
			if err := flush(); err != nil {
				return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if err := flush(); err != nil {
		return n, fmt.Errorf("clickhouse: export survey %d: %w", surveyID, err)
	}
	return n, pw.Close()
}

// appendArrow appends one scanned value to its column's builder.
func appendArrow(b array.Builder, v reflect.Value) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			b.AppendNull()
			return
		}
		v = v.Elem()
	}
	switch b := b.(type) {
	case *array.Int64Builder:
		b.Append(v.Int())
	case *array.Uint64Builder:
		b.Append(v.Uint())
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(v.Interface().(time.Time).Unix()))
	case *array.ListBuilder:
		b.Append(true)
		vb := b.ValueBuilder().(*array.StringBuilder)
		for _, x := range v.Interface().([]string) {
			vb.Append(x)
		}
	case *array.StringBuilder:
		b.Append(csvValue(v))
	default:
		b.AppendNull()
	}
}
