package clickhouse

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

var _ warehouse.Eraser = (*Sink)(nil)

func uuidOf(s string) uuid.UUID { return uuid.MustParse(s) }

// insertRows inserts rows into "table (columns)" in one batch.
func insertRows(t *testing.T, s *Sink, tableCols string, rows ...[]any) {
	t.Helper()
	b, err := s.Conn().PrepareBatch(ctxT(t), "INSERT INTO "+s.opts.Database+"."+tableCols)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := b.Append(r...); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func TestGoldenDDLErasures(t *testing.T) {
	got := migrationDDL(t, 75, newTmplData("surveysync", "warehouse", true))
	if !strings.Contains(got, "surveysync.erasures_local ON CLUSTER warehouse") ||
		!strings.Contains(got, "ENGINE = Distributed(warehouse, surveysync, erasures_local, cityHash64(toString(response_id)))") {
		t.Errorf("cluster DDL lacks erasures_local or its Distributed table:\n%s", got)
	}
}

// EraseRows removes every row of the erased responses from every table,
// leaves the others alone, and is idempotent; the audit rows read back at
// their latest state.
func TestEraseRows(t *testing.T) {
	if onCluster() {
		t.Skip("erasure on a replicated 18.x cluster is refused by design (TestEraseOnClusterGuard); this runs on the single node")
	}
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 5},
		{ID: guid(2), SurveyID: 1, Version: 100, Completed: &done, Answers: 3},
	})
	writeBatch(t, s, []testResponse{{ID: guid(1), SurveyID: 1, Version: 300, Deleted: true}})
	if err := s.WriteRejects(ctx, []pipeline.Reject{{SurveyID: 1, ResponseID: survey.GUID(strings.ToUpper(guid(1))), Stage: "fetch", Reason: "decode", RejectedAt: done}}); err != nil {
		t.Fatal(err)
	}
	insertRows(t, s, "webhook_events (event_id, survey_id, response_id, body)",
		[]any{"e1", int64(1), ptr(uuidOf(guid(1))), "{}"}, []any{"e2", int64(1), ptr(uuidOf(guid(2))), "{}"})
	insertRows(t, s, "uploaded_files (file_id, response_id, survey_id)", []any{uuidOf(guid(9)), uuidOf(guid(1)), int64(1)})
	now := time.Now().UTC().Truncate(time.Second)
	e := warehouse.Erasure{ResponseKey: warehouse.ResponseKey{SurveyID: 1, ResponseID: survey.GUID(guid(1))},
		Reason: warehouse.ReasonDeletedAtSource, State: warehouse.ErasureStarted, RequestedAt: now}
	if err := s.RecordErasures(ctx, []warehouse.Erasure{e}); err != nil {
		t.Fatal(err)
	}
	found, err := s.EraseRows(ctx, []warehouse.ResponseKey{e.ResponseKey})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"responses": 2, "answers": 5, "uploaded_files": 1, "webhook_events": 1, "rejects": 1}
	for k, v := range want {
		if found[k] != v {
			t.Errorf("found[%s] = %d, want %d (all: %v)", k, found[k], v, found)
		}
	}
	for _, tb := range []string{"responses", "answers", "uploaded_files", "webhook_events"} {
		if n := countRows(t, s, "SELECT count() FROM "+s.table(tb)+" WHERE response_id = toUUID('"+guid(1)+"')"); n != 0 {
			t.Errorf("%s keeps %d rows of the erased response", tb, n)
		}
		if n := countRows(t, s, "SELECT count() FROM "+s.table(tb)+" WHERE response_id = toUUID('"+guid(2)+"')"); n == 0 && tb != "uploaded_files" {
			t.Errorf("%s lost the other response's rows", tb)
		}
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("rejects")); n != 0 {
		t.Errorf("rejects keeps %d rows", n)
	}
	again, err := s.EraseRows(ctx, []warehouse.ResponseKey{e.ResponseKey})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range again {
		if v != 0 {
			t.Errorf("a second erase found %d rows in %s", v, k)
		}
	}
	e.State, e.CompletedAt, e.Erased = warehouse.ErasureDone, now.Add(time.Second), "responses=2 answers=5"
	if err := s.RecordErasures(ctx, []warehouse.Erasure{e}); err != nil {
		t.Fatal(err)
	}
	es, err := s.Erasures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].State != warehouse.ErasureDone || es[0].Erased != e.Erased || !es[0].CompletedAt.Equal(e.CompletedAt) || es[0].ResponseID != e.ResponseID {
		t.Errorf("erasures = %+v, want one done row like %+v", es, e)
	}
}

func TestResponsesOfContactAndEraseContact(t *testing.T) {
	if onCluster() {
		t.Skip("erasure on a replicated 18.x cluster is refused by design (TestEraseOnClusterGuard); this runs on the single node")
	}
	s, _ := openTest(t, nil)
	ctx := ctxT(t)
	done := baseTime.Add(time.Hour)
	writeBatch(t, s, []testResponse{
		{ID: guid(1), SurveyID: 1, Version: 100, Completed: &done, Answers: 1, ContactIDHash: "abc123"},
		{ID: guid(2), SurveyID: 2, Version: 100, Completed: &done, Answers: 1},
	})
	keys, err := s.ResponsesOfContact(ctx, 0, "ABC123")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ResponseID != survey.GUID(guid(1)) || keys[0].SurveyID != 1 {
		t.Errorf("ResponsesOfContact = %+v, want %s of survey 1", keys, guid(1))
	}
	insertRows(t, s, "pushed_contacts (feed, key, contact_id, contact_id_hash)",
		[]any{"f", "k1", int64(0), "abc123"}, []any{"f", "k2", int64(7), ""})
	n, err := s.EraseContact(ctx, 0, "abc123")
	if err != nil || n != 1 {
		t.Fatalf("EraseContact = %d, %v; want 1", n, err)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("pushed_contacts")); n != 1 {
		t.Errorf("pushed_contacts has %d rows, want the other contact's 1", n)
	}
}

// On a cluster the statements go to the _local tables ON CLUSTER; a
// replicated cluster of a server before 19.1 refuses, and names them.
func TestEraseOnClusterGuard(t *testing.T) {
	keys := []warehouse.ResponseKey{{SurveyID: 1, ResponseID: survey.GUID(guid(1))}}
	for _, tc := range []struct {
		major, minor uint64
		replicated   bool
		refused      bool
		verb         string
	}{
		{18, 16, true, true, "ALTER TABLE"},
		{18, 16, false, false, "ALTER TABLE"},
		{22, 8, true, false, "ALTER TABLE"},
		{23, 3, true, false, "DELETE FROM"},
	} {
		s := &Sink{opts: Options{Database: "surveysync", Cluster: "warehouse"}, tmpl: newTmplData("surveysync", "warehouse", true)}
		s.tmpl.Replicated = tc.replicated
		s.version.Version.Major, s.version.Version.Minor = tc.major, tc.minor
		ids, _ := idList(keys, false)
		strIDs, _ := idList(keys, true)
		if tc.refused {
			err := s.refusal(ids, strIDs)
			if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "surveysync.answers_local ON CLUSTER warehouse DELETE WHERE") {
				t.Errorf("%d.%d replicated: err = %v, want a refusal naming the statements", tc.major, tc.minor, err)
			}
			continue
		}
		if err := s.refusal(ids, strIDs); err != nil {
			t.Errorf("%d.%d: refused: %v", tc.major, tc.minor, err)
		}
		stmts := s.eraseStatements(ids, strIDs)
		want := tc.verb + " surveysync.answers_local ON CLUSTER warehouse"
		if tc.verb == "ALTER TABLE" {
			want = "ALTER TABLE surveysync.answers_local ON CLUSTER warehouse DELETE WHERE response_id IN (toUUID('" + guid(1) + "'))"
		}
		if !strings.HasPrefix(stmts[0], want) || len(stmts) != len(eraseTables) {
			t.Errorf("%d.%d: statements %q, want the first to start %q", tc.major, tc.minor, stmts, want)
		}
	}
}
