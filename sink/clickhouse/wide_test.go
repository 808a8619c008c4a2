package clickhouse

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/wide"
)

// TestWideViewUpkeep: the wide view follows Write alone (a new question
// replaces it), under its friendly name too, on every node (ON CLUSTER),
// with the same rows whether or not ClickHouse pushes a filter down into
// it, and refreshing it by hand changes nothing. What the view holds is
// the warehouse suite's (TestWarehouseSuite/ExportWide).
func TestWideViewUpkeep(t *testing.T) {
	s, _ := openTest(t, func(o *Options) {
		o.Wide = WideOptions{ChoiceIDs: true, Names: map[int64]string{4574: "spokojenost_2026"}}
	})
	ctx := ctxT(t)
	writeEmulatorResponses(t, s, 40)
	before, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	// A response with three questions the survey did not have (q0…q2).
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 4574, Version: uint64(time.Now().UnixNano()), Answers: 3}})
	cols, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != len(before)+6 { // q0…q2 and their choice ids
		t.Errorf("%d columns after a response with 3 new questions, want %d", len(cols), len(before)+6)
	}
	view := s.table(WideViewName(4574))
	count := func(q string) uint64 {
		t.Helper()
		return countRows(t, s, q)
	}

	// The friendly name is the same view.
	for _, name := range []string{WideViewName(4574), "spokojenost_2026"} {
		if n := count("SELECT count() FROM system.columns WHERE database = '" + s.Database() + "' AND table = '" + name + "'"); n != uint64(len(wide.ResponseColumns)+len(cols)) {
			t.Errorf("%s has %d columns, want %d", name, n, len(wide.ResponseColumns)+len(cols))
		}
		if n := count("SELECT count() FROM " + s.table(name) + " WHERE q1 != ''"); n != 1 {
			t.Errorf("%s: %d rows answer the new question, want 1", name, n)
		}
	}

	// The view's filters give the same rows with and without predicate
	// pushdown (a filter must never reach an older version).
	for _, where := range []string{
		"response_status = 'completed'",
		"spokojenost != ''",
		"response_id = toUUID('" + guid(1) + "')",
	} {
		var counts []uint64
		for _, on := range []int{0, 1} {
			var n uint64
			q := fmt.Sprintf("SELECT count() FROM (SELECT * FROM %s WHERE %s)", view, where)
			if err := s.Conn().QueryRow(ch.Context(ctx, ch.WithSettings(ch.Settings{"enable_optimize_predicate_expression": on})), q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			counts = append(counts, n)
		}
		if counts[0] != counts[1] {
			t.Errorf("WHERE %s: %d rows without pushdown, %d with", where, counts[0], counts[1])
		}
	}

	// Refreshing by hand (surveysync views --refresh) changes nothing.
	export := func() string {
		t.Helper()
		var buf bytes.Buffer
		if _, err := s.Exporter().Export(ctx, warehouse.ExportWide, 4574, time.Time{}, func(fields []wide.Field) (wide.Writer, error) {
			return wide.NewCSV(&buf, fields, false)
		}); err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(&buf).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		lines := make([]string, len(recs))
		for i, r := range recs {
			lines[i] = strings.Join(r, ",")
		}
		sort.Strings(lines[1:])
		return strings.Join(lines, "\n")
	}
	was := export()
	if _, err := s.RefreshWideViews(ctx, 4574); err != nil {
		t.Fatal(err)
	}
	if now := export(); now != was {
		t.Error("the view changed when refreshed by hand")
	}
	vs, err := s.WideViews(ctx)
	if err != nil || len(vs) != 1 || vs[0].SurveyID != 4574 || len(vs[0].Columns) != len(cols) || vs[0].View != view {
		t.Errorf("WideViews: %v %+v", err, vs)
	}
	rows := count("SELECT count() FROM " + s.table("responses_current") + " WHERE survey_id = 4574")

	// Every node has the view (ON CLUSTER), with every column, the same
	// rows, and no leftover of the swap.
	eachNode(t, func(addr string, c driver.Conn) {
		var n, got, left uint64
		if err := c.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ?",
			s.Database(), WideViewName(4574)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, "SELECT count() FROM "+view).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND (endsWith(name, '__new') OR endsWith(name, '__old'))",
			s.Database()).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if n != uint64(len(wide.ResponseColumns)+len(cols)) || got != rows || left != 0 {
			t.Errorf("node %s: view has %d columns (want %d), %d rows (want %d); %d leftover tables",
				addr, n, len(wide.ResponseColumns)+len(cols), got, rows, left)
		}
	})
}

// writeEmulatorResponses writes n responses of the emulator's survey 4574
// (uploads included) through Write.
func writeEmulatorResponses(t *testing.T, s *Sink, n int) {
	t.Helper()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	em, err := sim.New(sim.Options{
		Now:     func() time.Time { return now },
		Surveys: []sim.SurveySpec{{ID: 4574, Responses: n, Seed: 1, Files: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := flatten.NewBuilder(mem)
	defer b.Release()
	v := uint64(time.Now().UnixNano())
	for r := range em.Responses(4574) {
		v++
		if err := b.Add(flatten.Item{Response: &r, SurveyID: 4574, ResponseID: r.ResponseID, Version: v, SyncedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := s.Write(ctxT(t), batch); err != nil {
		t.Fatal(err)
	}
}

// TestWideViewOfAnOlderWarehouse: a survey whose answers were written
// before wide views existed (no wide_columns rows, no view) gets a view
// with every answered question at the first write of a new daemon.
func TestWideViewOfAnOlderWarehouse(t *testing.T) {
	skipOnCluster(t) // TRUNCATE stands for the older warehouse
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeEmulatorResponses(t, s, 30)
	want, err := s.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"TRUNCATE TABLE " + s.table("wide_columns"), "DROP TABLE " + s.table(WideViewName(4574))} {
		if err := s.Conn().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := Open(ctx, testOptions(s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	writeBatch(t, s2, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 1}})
	got, err := s2.WideColumns(ctx, 4574)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want)+1 { // + q0 of the hand-made response
		t.Fatalf("%d columns after the first write, want %d", len(got), len(want)+1)
	}
	var n uint64
	if err := s2.Conn().QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ?",
		s.Database(), WideViewName(4574)).Scan(&n); err != nil || n != uint64(len(wide.ResponseColumns)+len(got)) {
		t.Errorf("view has %d columns (%v), want %d", n, err, len(wide.ResponseColumns)+len(got))
	}
}

// TestWideViewKeptAcrossRestart: a new daemon (Sink) whose first write
// brings nothing new leaves the view as it is (no DDL per survey at every
// start).
func TestWideViewKeptAcrossRestart(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 3}})
	created := func() (m time.Time) {
		t.Helper()
		if err := s.Conn().QueryRow(ctx, "SELECT metadata_modification_time FROM system.tables WHERE database = ? AND name = ?",
			s.Database(), WideViewName(4574)).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := created()
	time.Sleep(1100 * time.Millisecond)
	s2, err := Open(ctx, testOptions(s.Database()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	writeBatch(t, s2, []testResponse{{ID: guid(2), SurveyID: 4574, Version: 2, Answers: 3}})
	if after := created(); !after.Equal(before) {
		t.Errorf("view re-created at %s (was %s) though nothing changed", after, before)
	}
	writeBatch(t, s2, []testResponse{{ID: guid(3), SurveyID: 4574, Version: 3, Answers: 4}}) // q3 is new
	if after := created(); after.Equal(before) {
		t.Error("view not replaced for a new question")
	}
}

// Choice ids turned on for a survey whose columns were recorded without
// them: the daemon's first write adds them and replaces the view; turned
// off again, the view drops them (they stay recorded, their names taken).
func TestWideViewChoiceIDsTurnedOn(t *testing.T) {
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 4574, Version: 1, Answers: 2}})
	columns := func() string {
		t.Helper()
		var cols string
		if err := s.Conn().QueryRow(ctx, "SELECT arrayStringConcat(groupArray(name), ',') FROM system.columns WHERE database = ? AND table = ? AND name LIKE 'q%'",
			s.Database(), WideViewName(4574)).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		return cols
	}
	before := columns()
	for _, on := range []bool{true, false} {
		o := testOptions(s.Database())
		o.Wide.ChoiceIDs = on
		s2, err := Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		writeBatch(t, s2, []testResponse{{ID: guid(2), SurveyID: 4574, Version: 2, Answers: 2}})
		s2.Close()
		got := columns()
		if on && !strings.Contains(got, "_id") {
			t.Errorf("choice ids on: view columns %s (before %s)", got, before)
		}
		if !on && got != before {
			t.Errorf("choice ids off again: view columns %s, want %s", got, before)
		}
		t.Logf("choice ids %v: %s", on, got)
	}
}
