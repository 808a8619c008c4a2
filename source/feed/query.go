package feed

import (
	"context"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"time"
)

// queryRows runs the feed's query and returns its rows one at a time; the
// result is streamed from ClickHouse, not held in memory. close must be
// called.
func (f *feed) queryRows(ctx context.Context) (rowIter, func() error, error) {
	rows, err := f.opts.ClickHouseQuery.Conn.Query(ctx, f.opts.ClickHouseQuery.Query)
	if err != nil {
		return nil, nil, fmt.Errorf("feed %s: query: %w", f.opts.Name, err)
	}
	cols := rows.Columns()
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c] = i
	}
	if err := f.mapper.checkColumns(func(c string) bool { _, ok := index[c]; return ok }); err != nil {
		rows.Close()
		return nil, nil, fmt.Errorf("feed %s: query result: %w", f.opts.Name, err)
	}
	types := rows.ColumnTypes()
	dest := make([]any, len(cols))
	for i, t := range types {
		dest[i] = reflect.New(t.ScanType()).Interface()
	}
	vals := make([]string, len(cols))
	get := func(col string) (string, bool) {
		i, ok := index[col]
		if !ok {
			return "", false
		}
		return vals[i], true
	}
	var n int64
	next := func() (sourceRow, error) {
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return sourceRow{}, fmt.Errorf("feed %s: query rows: %w", f.opts.Name, err)
			}
			return sourceRow{}, io.EOF
		}
		n++
		if err := rows.Scan(dest...); err != nil {
			return sourceRow{}, fmt.Errorf("feed %s: query row %d: %w", f.opts.Name, n, err)
		}
		for i, d := range dest {
			vals[i] = scalarText(reflect.ValueOf(d).Elem())
		}
		return sourceRow{line: n, get: get}, nil
	}
	return next, rows.Close, nil
}

// scalarText renders a scanned ClickHouse value as text: NULL as "",
// times as RFC 3339 UTC, numbers in decimal.
func scalarText(v reflect.Value) string {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case string:
		return x
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case net.IP:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return fmt.Sprint(v.Interface())
}

// runQuery runs the query once as one batch.
func (f *feed) runQuery(ctx context.Context, emit func(RowResult), dry bool) (Summary, error) {
	if err := f.ensureLoaded(ctx, dry); err != nil {
		return Summary{}, err
	}
	next, closeRows, err := f.queryRows(ctx)
	if err != nil {
		return Summary{}, err
	}
	defer func() { _ = closeRows() }() // read to the end or abandoned: a close error changes nothing
	id := "query:" + f.now().UTC().Format(time.RFC3339Nano)
	return f.runBatch(ctx, id, "query", next, emit, dry)
}
