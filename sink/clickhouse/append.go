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
		b.WriteString(quoteIdent(f.Name))
	}
	b.WriteString(")")
	return b.String()
}

// appendRecord appends every column of rec to batch, by position. Columns
// named in uuidCols hold lower-case GUID strings and go to UUID columns.
// The columns are converted into cv's slices, which the next column reuses:
// the driver copies every value out of them before Append returns.
func appendRecord(batch driver.Batch, rec arrow.RecordBatch, uuidCols map[string]bool, cv *conv) error {
	for i, f := range rec.Schema().Fields() {
		v, err := cv.values(rec.Column(i), f, uuidCols[f.Name])
		if err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
		if err := batch.Column(i).Append(v); err != nil {
			return fmt.Errorf("column %s: append: %w", f.Name, err)
		}
	}
	return nil
}

// conv holds the slices one column at a time is converted into, kept from
// column to column and from block to block of an INSERT, so that a block
// of 4,096 rows costs no new slice per column (they were a tenth of the
// daemon's allocated bytes on the 20k harness).
type conv struct {
	strs   []string
	ids    []uuid.UUID
	ints   []int64
	intPs  []*int64
	times  []time.Time
	timePs []*time.Time
}

// grow returns s with length n, reusing its array when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// values converts one Arrow column into the slice its ClickHouse column's
// Append accepts. The slice is valid until the next call.
func (cv *conv) values(col arrow.Array, f arrow.Field, isUUID bool) (any, error) {
	switch a := col.(type) {
	case *array.String:
		if isUUID {
			return cv.uuids(a)
		}
		return cv.stringValues(a), nil
	case *array.Int64:
		if f.Nullable {
			return cv.nullableInt64s(a), nil
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
			return cv.nullableTimes(a)
		}
		return cv.timeValues(a)
	case *array.List:
		return stringLists(a)
	default:
		return nil, fmt.Errorf("arrow type %s is not supported", col.DataType())
	}
}

func (cv *conv) stringValues(a *array.String) []string {
	cv.strs = grow(cv.strs, a.Len())
	out := cv.strs
	for i := range out {
		out[i] = a.Value(i) // "" for null
	}
	return out
}

func (cv *conv) uuids(a *array.String) ([]uuid.UUID, error) {
	cv.ids = grow(cv.ids, a.Len())
	out := cv.ids
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

func (cv *conv) nullableInt64s(a *array.Int64) []*int64 {
	cv.ints = grow(cv.ints, a.Len())
	cv.intPs = grow(cv.intPs, a.Len())
	vals, out := cv.ints, cv.intPs
	copy(vals, a.Int64Values())
	for i := range out {
		out[i] = nil
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

func (cv *conv) timeValues(a *array.Timestamp) ([]time.Time, error) {
	conv, err := toTimeFunc(a)
	if err != nil {
		return nil, err
	}
	raw := a.TimestampValues()
	cv.times = grow(cv.times, a.Len())
	out := cv.times
	for i := range out {
		out[i] = conv(raw[i])
	}
	return out, nil
}

func (cv *conv) nullableTimes(a *array.Timestamp) ([]*time.Time, error) {
	conv, err := toTimeFunc(a)
	if err != nil {
		return nil, err
	}
	raw := a.TimestampValues()
	cv.times = grow(cv.times, a.Len())
	cv.timePs = grow(cv.timePs, a.Len())
	vals, out := cv.times, cv.timePs
	for i := range out {
		out[i] = nil
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
