package wide

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"
)

// Field is one column of an export: its name and ClickHouse type (String,
// UUID, Int64, UInt64/16/8, Nullable(…), DateTime('UTC'), Array(String)).
type Field struct {
	Name string
	Type string
}

// Fields are the fields of a wide row: the response's columns, then cols.
func Fields(cols []Column) []Field {
	out := make([]Field, 0, len(ResponseColumns)+len(cols))
	for i, n := range ResponseColumns {
		out = append(out, Field{Name: n, Type: responseTypes[i]})
	}
	for _, c := range cols {
		out = append(out, Field{Name: c.Name, Type: c.Type()})
	}
	return out
}

// responseTypes are the ClickHouse types of ResponseColumns, same positions.
var responseTypes = []string{
	"UUID", "Int64", "String", "String", "DateTime('UTC')", "Nullable(DateTime('UTC'))", "Nullable(Int64)",
	"Nullable(Int64)", "Nullable(Int64)", "String", "String", "Array(String)", "Array(String)",
	"DateTime('UTC')", "UInt64",
}

// Writer writes wide rows to a file format.
type Writer interface {
	// Write writes one row: one value per field, in order. Values are
	// string, int64, uint64, time.Time, uuid.UUID or []string, or pointers
	// to them (nil is NULL); a nil interface is NULL too.
	Write(row []any) error
	// Close writes what is buffered and the format's trailer; it does not
	// close the underlying io.Writer.
	Close() error
}

// NewCSV returns a Writer of CSV to w: a header of the field names, then one
// record per row. Text as is, numbers in decimal, NULL as an empty field,
// times as 2006-01-02 15:04:05 (UTC), arrays as JSON arrays of strings. bom
// starts the output with a UTF-8 byte order mark (for Excel).
func NewCSV(w io.Writer, fields []Field, bom bool) (Writer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	if bom {
		if _, err := bw.WriteString("\ufeff"); err != nil {
			return nil, err
		}
	}
	cw := csv.NewWriter(bw)
	header := make([]string, len(fields))
	for i, f := range fields {
		header[i] = f.Name
	}
	if err := cw.Write(header); err != nil {
		return nil, err
	}
	return &csvWriter{bw: bw, cw: cw, rec: make([]string, len(fields))}, nil
}

type csvWriter struct {
	bw  *bufio.Writer
	cw  *csv.Writer
	rec []string
}

func (w *csvWriter) Write(row []any) error {
	if len(row) != len(w.rec) {
		return fmt.Errorf("wide: CSV row of %d values, want %d", len(row), len(w.rec))
	}
	for i, v := range row {
		w.rec[i] = Text(v)
	}
	return w.cw.Write(w.rec)
}

func (w *csvWriter) Close() error {
	w.cw.Flush()
	if err := w.cw.Error(); err != nil {
		return err
	}
	return w.bw.Flush()
}

// Text formats one value as a CSV export does ("" for NULL).
func Text(v any) string {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return ""
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
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
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
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
	return fmt.Sprint(rv.Interface())
}

// RowGroup is the number of rows per Parquet row group (and Arrow record)
// a Parquet Writer buffers before writing it.
const RowGroup = 16384

// arrowType is the Arrow type of a column of ClickHouse type chType.
func arrowType(chType string) (arrow.DataType, bool) {
	nullable := strings.HasPrefix(chType, "Nullable(")
	base := chType
	if nullable {
		base = strings.TrimSuffix(strings.TrimPrefix(chType, "Nullable("), ")")
	}
	switch {
	case base == "Int64", base == "Int32", base == "Int16", base == "Int8":
		return arrow.PrimitiveTypes.Int64, nullable
	case base == "UInt64", base == "UInt32", base == "UInt16", base == "UInt8":
		return arrow.PrimitiveTypes.Uint64, nullable
	case strings.HasPrefix(base, "DateTime"):
		return &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}, nullable
	case base == "Array(String)":
		return arrow.ListOf(arrow.BinaryTypes.String), false
	}
	return arrow.BinaryTypes.String, nullable // String, UUID, anything else as text
}

// NewParquet returns a Writer of one Parquet file (Snappy) to w, streamed:
// rows are buffered into Arrow records of RowGroup rows, each written as a
// row group, so memory does not grow with the number of rows. Types: String
// and UUID as strings, Int64 and Nullable(Int64) as (nullable) int64, times
// as UTC timestamps in seconds, arrays as lists of strings.
func NewParquet(w io.Writer, fields []Field) (Writer, error) {
	afs := make([]arrow.Field, len(fields))
	for i, f := range fields {
		t, nullable := arrowType(f.Type)
		afs[i] = arrow.Field{Name: f.Name, Type: t, Nullable: nullable}
	}
	schema := arrow.NewSchema(afs, nil)
	mem := memory.NewGoAllocator()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithAllocator(mem),
		parquet.WithCreatedBy("surveysync"))
	pw, err := pqarrow.NewFileWriter(schema, nopCloser{w}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		return nil, err
	}
	return &parquetWriter{pw: pw, rb: array.NewRecordBuilder(mem, schema)}, nil
}

// nopCloser keeps the Parquet writer from closing the caller's writer.
type nopCloser struct{ io.Writer }

type parquetWriter struct {
	pw      *pqarrow.FileWriter
	rb      *array.RecordBuilder
	pending int
	closed  bool
}

func (w *parquetWriter) Write(row []any) error {
	if len(row) != len(w.rb.Fields()) {
		return fmt.Errorf("wide: Parquet row of %d values, want %d", len(row), len(w.rb.Fields()))
	}
	for i, v := range row {
		appendArrow(w.rb.Field(i), v)
	}
	if w.pending++; w.pending == RowGroup {
		return w.flush()
	}
	return nil
}

func (w *parquetWriter) flush() error {
	if w.pending == 0 {
		return nil
	}
	rec := w.rb.NewRecordBatch()
	defer rec.Release()
	w.pending = 0
	return w.pw.Write(rec)
}

func (w *parquetWriter) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.rb.Release()
	err := w.flush()
	if cerr := w.pw.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendArrow appends one value to its column's builder.
func appendArrow(b array.Builder, v any) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		b.AppendNull()
		return
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			b.AppendNull()
			return
		}
		rv = rv.Elem()
	}
	switch b := b.(type) {
	case *array.Int64Builder:
		b.Append(rv.Int())
	case *array.Uint64Builder:
		b.Append(rv.Uint())
	case *array.TimestampBuilder:
		b.Append(arrow.Timestamp(rv.Interface().(time.Time).Unix()))
	case *array.ListBuilder:
		b.Append(true)
		vb := b.ValueBuilder().(*array.StringBuilder)
		for _, x := range rv.Interface().([]string) {
			vb.Append(x)
		}
	case *array.StringBuilder:
		b.Append(Text(rv.Interface()))
	default:
		b.AppendNull()
	}
}
