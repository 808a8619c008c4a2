// Package warehousetest is the conformance suite of the warehouse contract
// (package sink/warehouse): one set of tests that every backend passes, in
// the manner of River's riverdrivertest.Exercise. sink/parquet runs it
// always, sink/clickhouse when a test server is configured (and once more
// on the test cluster, make test-cluster). Production code never imports
// it: only the backends' _test.go files do.
//
// The tests share one store per Exercise (a Parquet folder, a ClickHouse
// database), each in surveys, feeds and ids of its own, so that a
// backend's run takes seconds; the privacy test, which rewrites the whole
// warehouse, has a store of its own. A new warehouse capability is one
// method, one implementation per backend and one test here.
package warehousetest

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/wide"
)

// Backend describes the warehouse under test.
type Backend struct {
	// NewStore makes fresh, empty storage (a folder, a database) that is
	// removed when t ends, and returns how to open a Warehouse on it, with
	// wide.choice_ids on. open may be called again once the warehouse it
	// returned is closed: a restart.
	NewStore func(t *testing.T) (open func(t *testing.T) warehouse.Warehouse)

	// Parts says which optional parts the backend has: the documented
	// choice the suite holds it to (a nil part where one is expected, or
	// the reverse, fails).
	Parts Parts

	// MutationsRefused, when not "", is the backend's documented refusal
	// to rewrite written rows (ClickHouse 18.x on a replicated cluster):
	// EraseRows and ApplyPrivacy must fail with an error containing it,
	// and leave the rows as they were.
	MutationsRefused string
}

// Parts are the optional parts of a warehouse.Warehouse: true where the
// backend returns one, false where it returns nil.
type Parts struct {
	Inventory       bool
	RejectInventory bool // the Inventory is also a warehouse.RejectInventory
	WebhookLog      bool
	Eraser          bool
	QueryConn       bool
	Leases          bool
}

// Exercise runs the suite against b.
func Exercise(t *testing.T, b Backend) {
	t.Helper()
	open := b.NewStore(t)
	wh := open(t)
	s := &suite{b: b, open: open, wh: wh}
	t.Cleanup(func() {
		if err := s.wh.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		// Fresh runs first: it finds the shared store empty.
		{"Fresh", testFresh},
		{"Parts", testParts},
		{"WriteTwice", testWriteTwice},
		{"Versions", testVersions},
		{"ExportWide", testExportWide},
		{"States", testStates},
		{"Surveys", testSurveys},
		{"Rejects", testRejects},
		{"FileIndex", testFileIndex},
		{"FeedLedger", testFeedLedger},
		{"Erase", testErase},
		{"Lease", testLease},
		{"Verify", testVerify},
		{"VerifyLog", testVerifyLog},
		{"Summary", testSummary},
		// Restart closes the shared warehouse and opens it again.
		{"Restart", testRestart},
		{"Privacy", testPrivacy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

// suite is the state the tests share.
type suite struct {
	b    Backend
	open func(t *testing.T) warehouse.Warehouse
	wh   warehouse.Warehouse // the shared store's, replaced by Restart
}

// ctx is a context for one test, cancelled when it ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// guid is the n-th response id of a survey: lower case, distinct per
// survey, so that the tests' rows never meet.
func guid(surveyID int64, n int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", surveyID, n)
}

// Each test's surveys, and feeds (by name).
const (
	surveyWrite    = 910001
	surveyVersions = 910002
	surveyWide     = 4574 // the emulator's survey with every question kind
	surveyStates   = 910004
	surveyRejects  = 910005
	surveyRejects2 = 910006
	surveyFiles    = 910007
	surveyErase    = 910008
	surveyErase2   = 910009
	surveyRestart  = 910010
	surveyPrivacy  = 910011
	surveyVerify   = 910013
	surveyVerify2  = 910014
)

// base is the time of the tests' data: versions are nanoseconds after it.
var base = time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)

// version is the _version of a write k seconds after base (the pipeline's
// versions are fetch times in nanoseconds).
func version(k int) uint64 { return uint64(base.Add(time.Duration(k) * time.Second).UnixNano()) }

// Question ids of the hand-made responses.
const (
	qChoice = 501 // single choice
	qEssay  = 502 // essay: the text names the version
	qUpload = 503 // file_upload: one file
	qScale  = 504 // scale
)

// resp describes one version of a hand-made response.
type resp struct {
	survey  int64
	n       int    // guid(survey, n)
	status  string // "" completed
	version uint64
	synced  time.Time // zero: base
	deleted bool      // a deletion (a 404: no detail)
	essay   string    // "" "essay v<version>"
	contact int64     // contact_id, 0 none
	hash    string    // contact_id_hash
	upload  bool      // answers qUpload with fileID(survey, n)
	noScale bool      // leave qScale out (one answer fewer)
	created time.Time // date_created; zero: base (date_completed a minute after, when completed)
}

func (r resp) id() string { return guid(r.survey, r.n) }

// fileID is the upload of response n.
func fileID(surveyID int64, n int) survey.GUID {
	return survey.GUID(fmt.Sprintf("%08x-f11e-4000-8000-%012x", surveyID, n))
}

// answers is the number of answers rows r makes.
func (r resp) answers() int {
	if r.deleted {
		return 0
	}
	n := 2
	if r.upload {
		n++
	}
	if !r.noScale {
		n++
	}
	return n
}

// detail is r as the service sends it.
func (r resp) detail() *survey.Response {
	status := r.status
	if status == "" {
		status = survey.StatusCompleted
	}
	essay := r.essay
	if essay == "" {
		essay = fmt.Sprintf("essay v%d", r.version)
	}
	created := r.created
	if created.IsZero() {
		created = base
	}
	label := "Spokojen"
	qs := []survey.Question{
		{ID: qChoice, Type: "single", Title: "Jak jste spokojen?", Variable: "spokojenost",
			Answers: []survey.Answer{{ChoiceID: survey.Int(1), ChoiceLabel: &label}}},
		{ID: qEssay, Type: "essay", Title: "Co zlepšit?", Variable: "zlepseni", Answers: []survey.Answer{{Text: &essay}}},
	}
	if r.upload {
		f := fileID(r.survey, r.n)
		qs = append(qs, survey.Question{ID: qUpload, Type: "file_upload", Title: "Příloha", Variable: "priloha",
			Answers: []survey.Answer{{FileID: &f}}})
	}
	if !r.noScale {
		qs = append(qs, survey.Question{ID: qScale, Type: "scale", Title: "Doporučil byste nás?", Variable: "nps",
			Answers: []survey.Answer{{Value: survey.Int(9)}}})
	}
	d := &survey.Response{
		ResponseID: survey.GUID(r.id()), SurveyID: r.survey, SurveyName: fmt.Sprintf("Průzkum %d", r.survey),
		IPAddress: "10.0.0.1", DateCreated: survey.Time{Time: created}, ResponseStatus: status,
		URLParameters: []survey.URLParameter{{Name: "source", Value: "newsletter"}},
		Pages:         []survey.Page{{ID: 1, Questions: qs}},
	}
	if status == survey.StatusCompleted {
		d.DateCompleted = survey.TimeOf(created.Add(time.Minute))
	}
	if r.contact != 0 {
		d.ContactID = &r.contact
	}
	d.ContactIDHash = r.hash
	return d
}

// batch flattens rs into one batch; the caller releases it.
func batch(t *testing.T, rs ...resp) *flatten.Batch {
	t.Helper()
	b := flatten.NewBuilder(memory.NewGoAllocator())
	defer b.Release()
	for _, r := range rs {
		it := flatten.Item{SurveyID: r.survey, ResponseID: survey.GUID(r.id()), Version: r.version, SyncedAt: r.synced, Deleted: r.deleted}
		if it.SyncedAt.IsZero() {
			it.SyncedAt = base
		}
		if !r.deleted {
			it.Response = r.detail()
		}
		if err := b.Add(it); err != nil {
			t.Fatalf("flatten response %s: %v", r.id(), err)
		}
	}
	return b.Flush()
}

// write writes rs in one batch.
func write(t *testing.T, wh warehouse.Warehouse, rs ...resp) {
	t.Helper()
	b := batch(t, rs...)
	defer b.Release()
	if err := wh.Write(ctx(t), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// exportCSV exports table of surveyID as CSV and reads it back: the rows
// as column → value (arrays "[a|b]", NULL "").
func exportCSV(t *testing.T, wh warehouse.Warehouse, table string, surveyID int64, since time.Time) []map[string]string {
	t.Helper()
	var buf bytes.Buffer
	n, err := wh.Exporter().Export(ctx(t), table, surveyID, since, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewCSV(&buf, fields, false)
	})
	if err != nil {
		t.Fatalf("export %s of survey %d: %v", table, surveyID, err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatalf("export %s of survey %d: the CSV does not read back: %v", table, surveyID, err)
	}
	if len(recs) == 0 {
		t.Fatalf("export %s of survey %d: no header", table, surveyID)
	}
	if n != len(recs)-1 {
		t.Errorf("export %s of survey %d: says %d rows, wrote %d", table, surveyID, n, len(recs)-1)
	}
	out := make([]map[string]string, 0, len(recs)-1)
	for _, rec := range recs[1:] {
		row := map[string]string{}
		for i, h := range recs[0] {
			row[h] = canonical(rec[i])
		}
		out = append(out, row)
	}
	return out
}

// canonical renders a CSV cell holding a JSON array as "[a|b]".
func canonical(v string) string {
	if !strings.HasPrefix(v, "[") {
		return v
	}
	var vs []string
	if err := json.Unmarshal([]byte(v), &vs); err != nil {
		return v
	}
	return "[" + strings.Join(vs, "|") + "]"
}

// column is the sorted values of one column of rows, each joined with the
// response id when by is set.
func column(rows []map[string]string, name string, byID bool) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		v := r[name]
		if byID {
			v = r["response_id"] + "=" + v
		}
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// current is the survey's current responses (Inventory) as id → status.
func current(t *testing.T, wh warehouse.Warehouse, surveyID int64) map[string]string {
	t.Helper()
	inv := wh.Inventory()
	out := map[string]string{}
	if inv == nil {
		// No inventory: the export says the same thing.
		for _, r := range exportCSV(t, wh, warehouse.ExportResponses, surveyID, time.Time{}) {
			out[r["response_id"]] = r["response_status"]
		}
		return out
	}
	got, err := inv.CurrentResponses(ctx(t), surveyID)
	if err != nil {
		t.Fatalf("CurrentResponses(%d): %v", surveyID, err)
	}
	for id, st := range got {
		out[strings.ToLower(string(id))] = st
	}
	return out
}

func itoa[N int | int64 | uint64](n N) string { return fmt.Sprint(n) }

// only returns the items of a load that keep keeps (the tests share the
// store: each looks at its own); t fails on the load's error.
func only[T any](t *testing.T, load string, all []T, err error, keep func(T) bool) []T {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", load, err)
	}
	var out []T
	for _, x := range all {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
