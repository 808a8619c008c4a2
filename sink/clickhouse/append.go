package clickhouse

import (
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/google/uuid"
)

// Arrow → clickhouse-go column adapter. The native batch API takes Go
// slices per column, so each Arrow column is converted once, column-wise,
// into the slice type its ClickHouse column accepts:
//
//	string              → []string  (or []uuid.UUID for UUID columns)
//	int64               → []int64 (the Arrow buffer itself), nullable → []*int64
//	uint8/uint16/uint64 → the Arrow buffer itself
//	timestamp           → []time.Time, nullable → []*time.Time
//	list<string>        → [][]string (Nested / Array(String))

// insertSQL is the INSERT statement naming every column of schema (old
// servers need the list).
func insertSQL(table string, schema *arrow.Schema) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	for i, f := range schema.Fields() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("`" + f.Name + "`")
	}
	b.WriteString(")")
	return b.String()
}

// appendRecord appends every column of rec to batch, by position. Columns
// named in uuidCols hold lower-case GUID strings and go to UUID columns.
func appendRecord(batch driver.Batch, rec arrow.RecordBatch, uuidCols map[string]bool) error {
	for i, f := range rec.Schema().Fields() {
		v, err := columnValues(rec.Column(i), f, uuidCols[f.Name])
		if err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
		if err := batch.Column(i).Append(v); err != nil {
			return fmt.Errorf("column %s: append: %w", f.Name, err)
		}
	}
	return nil
}

// columnValues converts one Arrow column into the slice its ClickHouse
// column's Append accepts.
func columnValues(col arrow.Array, f arrow.Field, isUUID bool) (any, error) {
	switch a := col.(type) {
	case *array.String:
		if isUUID {
			return uuids(a)
		}
		return stringValues(a), nil
	case *array.Int64:
		if f.Nullable {
			return nullableInt64s(a), nil
		}
		return a.Int64Values(), nil
	case *array.Uint8:
		return a.Uint8Values(), nil
	case *array.Uint16:
		return a.Uint16Values(), nil
	case *array.Uint64:
		return a.Uint64Values(), nil
	case *array.Timestamp:
		if f.Nullable {
			return nullableTimes(a)
		}
		return times(a)
	case *array.List:
		return stringLists(a)
	default:
		return nil, fmt.Errorf("arrow type %s is not supported", col.DataType())
	}
}

func stringValues(a *array.String) []string {
	out := make([]string, a.Len())
	for i := range out {
		out[i] = a.Value(i) // "" for null
	}
	return out
}

func uuids(a *array.String) ([]uuid.UUID, error) {
	out := make([]uuid.UUID, a.Len())
	for i := range out {
		if a.IsNull(i) {
			return nil, fmt.Errorf("row %d: null UUID", i)
		}
		u, err := uuid.Parse(a.Value(i))
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		out[i] = u
	}
	return out, nil
}

func nullableInt64s(a *array.Int64) []*int64 {
	vals := make([]int64, a.Len())
	copy(vals, a.Int64Values())
	out := make([]*int64, a.Len())
	for i := range out {
		if a.IsValid(i) {
			out[i] = &vals[i]
		}
	}
	return out
}

// toTime converts one Arrow timestamp to time.Time in UTC.
func toTimeFunc(a *array.Timestamp) (func(arrow.Timestamp) time.Time, error) {
	unit := a.DataType().(*arrow.TimestampType).Unit
	switch unit {
	case arrow.Second:
		return func(t arrow.Timestamp) time.Time { return time.Unix(int64(t), 0).UTC() }, nil
	case arrow.Millisecond:
		return func(t arrow.Timestamp) time.Time { return time.UnixMilli(int64(t)).UTC() }, nil
	case arrow.Microsecond:
		return func(t arrow.Timestamp) time.Time { return time.UnixMicro(int64(t)).UTC() }, nil
	case arrow.Nanosecond:
		return func(t arrow.Timestamp) time.Time { return time.Unix(0, int64(t)).UTC() }, nil
	}
	return nil, fmt.Errorf("timestamp unit %s is not supported", unit)
}

func times(a *array.Timestamp) ([]time.Time, error) {
	conv, err := toTimeFunc(a)
	if err != nil {
		return nil, err
	}
	raw := a.TimestampValues()
	out := make([]time.Time, a.Len())
	for i := range out {
		out[i] = conv(raw[i])
	}
	return out, nil
}

func nullableTimes(a *array.Timestamp) ([]*time.Time, error) {
	conv, err := toTimeFunc(a)
	if err != nil {
		return nil, err
	}
	raw := a.TimestampValues()
	vals := make([]time.Time, a.Len())
	out := make([]*time.Time, a.Len())
	for i := range out {
		if a.IsValid(i) {
			vals[i] = conv(raw[i])
			out[i] = &vals[i]
		}
	}
	return out, nil
}

func stringLists(a *array.List) ([][]string, error) {
	values, ok := a.ListValues().(*array.String)
	if !ok {
		return nil, fmt.Errorf("list of %s is not supported", a.ListValues().DataType())
	}
	// One backing slice for all elements, sub-sliced per row.
	all := make([]string, values.Len())
	for i := range all {
		all[i] = values.Value(i)
	}
	offsets := a.Offsets()
	out := make([][]string, a.Len())
	for i := range out {
		if a.IsNull(i) {
			out[i] = []string{}
			continue
		}
		out[i] = all[offsets[i]:offsets[i+1]:offsets[i+1]]
	}
	return out, nil
}
