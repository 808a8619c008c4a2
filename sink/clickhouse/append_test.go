package clickhouse

import (
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestConvReusesItsSlicesSafely converts columns of different lengths and
// nulls one after the other through one conv, as an INSERT's blocks do: each
// conversion is whole and right on its own (a null left from an earlier
// column, or a value from a longer one, would show here).
func TestConvReusesItsSlicesSafely(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	ints := func(vals []int64, valid []bool) arrow.Array {
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.AppendValues(vals, valid)
		return b.NewArray()
	}
	stamps := func(vals []arrow.Timestamp, valid []bool) arrow.Array {
		b := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"})
		defer b.Release()
		b.AppendValues(vals, valid)
		return b.NewArray()
	}
	strs := func(vals ...string) arrow.Array {
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.AppendValues(vals, nil)
		return b.NewArray()
	}
	nullable := arrow.Field{Name: "x", Nullable: true}
	plain := arrow.Field{Name: "x"}
	deref := func(v any) []any {
		var out []any
		switch v := v.(type) {
		case []*int64:
			for _, p := range v {
				if p == nil {
					out = append(out, nil)
				} else {
					out = append(out, *p)
				}
			}
		case []*time.Time:
			for _, p := range v {
				if p == nil {
					out = append(out, nil)
				} else {
					out = append(out, p.UnixMilli())
				}
			}
		case []time.Time:
			for _, p := range v {
				out = append(out, p.UnixMilli())
			}
		case []string:
			for _, s := range v {
				out = append(out, s)
			}
		}
		return out
	}
	cases := []struct {
		col   arrow.Array
		field arrow.Field
		want  []any
	}{
		{ints([]int64{1, 2, 3, 4}, nil), nullable, []any{int64(1), int64(2), int64(3), int64(4)}},
		{ints([]int64{0, 5, 0}, []bool{false, true, false}), nullable, []any{nil, int64(5), nil}},
		{ints([]int64{7, 0}, []bool{true, false}), nullable, []any{int64(7), nil}},
		{stamps([]arrow.Timestamp{1000, 2000, 3000}, nil), plain, []any{int64(1000), int64(2000), int64(3000)}},
		{stamps([]arrow.Timestamp{0, 4000}, []bool{false, true}), nullable, []any{nil, int64(4000)}},
		{stamps([]arrow.Timestamp{5000}, nil), plain, []any{int64(5000)}},
		{strs("a", "bb", "ccc"), plain, []any{"a", "bb", "ccc"}},
		{strs("d"), plain, []any{"d"}},
	}
	var cv conv
	for i, c := range cases {
		v, err := cv.values(c.col, c.field, false)
		c.col.Release()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got := deref(v); !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d: got %v, want %v", i, got, c.want)
		}
	}
}
