package warehousetest

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// testLease: a renewed lease is live with what it says of its daemon; a
// released one is not; a lease not renewed within the window is not.
func testLease(t *testing.T, s *suite) {
	ls := s.wh.Leases()
	if ls == nil {
		return // testParts holds the backend to its choice
	}
	c := ctx(t)
	lease := func(host string, started time.Time) warehouse.Lease {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		return warehouse.Lease{ID: hex.EncodeToString(b[:]), Host: host, PID: 4242, Started: started, Version: "v1.2.3"}
	}
	started := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	a, b := lease("uzel-a", started), lease("uzel-b", started.Add(time.Second))
	for _, l := range []warehouse.Lease{a, b} {
		if err := ls.Renew(c, l); err != nil {
			t.Fatal(err)
		}
	}
	live := func(within time.Duration) []warehouse.Lease {
		t.Helper()
		all, err := ls.Live(c, within)
		if err != nil {
			t.Fatal(err)
		}
		var out []warehouse.Lease
		for _, l := range all {
			if l.ID == a.ID || l.ID == b.ID {
				if l.HeartbeatAge < 0 || l.HeartbeatAge > 30*time.Second {
					t.Errorf("lease %s: heartbeat age %s, just renewed", l.Host, l.HeartbeatAge)
				}
				out = append(out, l)
			}
		}
		return out
	}
	ignoreAge := cmpopts.IgnoreFields(warehouse.Lease{}, "HeartbeatAge")
	if diff := cmp.Diff([]warehouse.Lease{a, b}, live(time.Minute), ignoreAge); diff != "" {
		t.Errorf("Live (-want +got):\n%s", diff)
	}
	if err := ls.Release(c, a); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]warehouse.Lease{b}, live(time.Minute), ignoreAge); diff != "" {
		t.Errorf("Live after a release (-want +got):\n%s", diff)
	}
	// Renewed again after its release: live again (a daemon restarted
	// with the same id never happens, but the latest row wins).
	if err := ls.Renew(c, a); err != nil {
		t.Fatal(err)
	}
	if got := live(time.Minute); len(got) != 2 {
		t.Errorf("Live after a renewal: %d leases, want 2", len(got))
	}
	if got := live(0); len(got) != 0 {
		t.Errorf("Live within 0: %v", got)
	}
}

// testRestart: what the warehouse stored is there after a restart (the
// warehouse closed and opened again), and an erasure recorded as started
// is carried through then: rows of the response written after the first
// pass (a write in flight before the tombstone was seen) are found too.
func testRestart(t *testing.T, s *suite) {
	wh := s.wh
	c := ctx(t)
	write(t, wh, resp{survey: surveyRestart, n: 1, version: version(1)}, resp{survey: surveyRestart, n: 2, version: version(1), upload: true})
	idx, err := wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	file := files.Record{FileRef: files.FileRef{SurveyID: surveyRestart, ResponseID: survey.GUID(guid(surveyRestart, 2)), QuestionID: qUpload,
		FileID: fileID(surveyRestart, 2)}, ObjectURL: "s3://prilohy/y", Error: "timeout", Attempts: 2, StoredAt: base, Version: 7}
	if err := idx.Record(c, []files.Record{file}); err != nil {
		t.Fatal(err)
	}
	key := warehouse.ResponseKey{SurveyID: surveyRestart, ResponseID: survey.GUID(guid(surveyRestart, 2))}
	tomb := warehouse.Erasure{ResponseKey: key, Reason: warehouse.ReasonDeletedAtSource, State: warehouse.ErasureStarted,
		RequestedAt: time.Now().UTC().Truncate(time.Second)}
	er := wh.Eraser()
	if er != nil {
		if err := er.RecordErasures(c, []warehouse.Erasure{tomb}); err != nil {
			t.Fatal(err)
		}
	}
	wantStates := states(t, wh, surveyStates)
	wantLedger := contacts(t, wh, "suite")
	before := current(t, wh, surveyRestart)

	if err := wh.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wh = s.open(t)
	s.wh = wh

	if got := current(t, wh, surveyRestart); !maps.Equal(got, before) || len(got) != 2 {
		t.Errorf("current responses after a restart: %v, want %v", got, before)
	}
	if diff := cmp.Diff(wantStates, states(t, wh, surveyStates)); diff != "" {
		t.Errorf("states after a restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLedger, contacts(t, wh, "suite"), cmp.AllowUnexported(contactKey{})); diff != "" {
		t.Errorf("feed ledger after a restart (-want +got):\n%s", diff)
	}
	idx, err = wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := idx.FilesOf(c, surveyRestart, key.ResponseID); err != nil || len(got) != 1 || got[0] != file {
		t.Errorf("file index after a restart: %v, %v; want %v", got, err, file)
	}
	if er == nil {
		return
	}
	er = wh.Eraser()
	if diff := cmp.Diff([]warehouse.Erasure{tomb}, erasures(t, er, surveyRestart)); diff != "" {
		t.Errorf("Erasures after a restart (-want +got):\n%s", diff)
	}
	if s.b.MutationsRefused != "" {
		return // testErase checks the refusal
	}
	// The erasure is carried through in two passes, a version written
	// between them.
	if _, err := er.EraseRows(c, []warehouse.ResponseKey{key}); err != nil {
		t.Fatal(err)
	}
	write(t, wh, resp{survey: surveyRestart, n: 2, version: version(2)})
	found, err := er.EraseRows(c, []warehouse.ResponseKey{key})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"responses": 1, "answers": 3}, nonZero(found)); diff != "" {
		t.Errorf("the second pass found (-want +got):\n%s", diff)
	}
	if got := current(t, wh, surveyRestart); len(got) != 1 {
		t.Errorf("current responses after the erasure: %v, want only response 1", got)
	}
}
