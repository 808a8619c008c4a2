package warehousetest

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// states returns the checkpoints of surveyID's streams.
func states(t *testing.T, wh warehouse.Warehouse, surveyID int64) []pipeline.StreamState {
	t.Helper()
	all, err := wh.LoadStates(ctx(t))
	return only(t, "LoadStates", all, err, func(st pipeline.StreamState) bool { return st.SurveyID == surveyID })
}

// testStates: checkpoints read back as saved (UTC, to the second), a
// later save of a stream replaces it and leaves the others, a cycle in
// flight is kept and cleared, and they are ordered by survey and stream.
func testStates(t *testing.T, s *suite) {
	wh := s.wh
	at := base.Add(30 * time.Minute)
	saved := []pipeline.StreamState{
		{SurveyID: surveyStates, Stream: pipeline.StreamPartial, Watermark: at, LastRunAt: at.Add(time.Minute), Synced: 3, UpdatedAt: at.Add(time.Minute)},
		{SurveyID: surveyStates, Stream: pipeline.StreamCompleted, Watermark: at, LastRunAt: at.Add(time.Minute), LastError: "HTTP 503 Služba nedostupná",
			Synced: 120, UpdatedAt: at.Add(time.Minute), CycleStartedAt: at.Add(-time.Minute), CycleListed: 500, CycleDone: 120},
	}
	if err := wh.SaveStates(ctx(t), saved); err != nil {
		t.Fatal(err)
	}
	want := []pipeline.StreamState{saved[1], saved[0]} // by stream
	if diff := cmp.Diff(want, states(t, wh, surveyStates)); diff != "" {
		t.Errorf("LoadStates (-want +got):\n%s", diff)
	}
	// The completed stream's cycle ends; the partial one is not saved.
	next := saved[1]
	next.Watermark, next.LastError, next.Synced = at.Add(time.Hour), "", 500
	next.CycleStartedAt, next.CycleListed, next.CycleDone = time.Time{}, 0, 0
	next.UpdatedAt = at.Add(time.Hour)
	if err := wh.SaveStates(ctx(t), []pipeline.StreamState{next}); err != nil {
		t.Fatal(err)
	}
	got := states(t, wh, surveyStates)
	if diff := cmp.Diff([]pipeline.StreamState{next, saved[0]}, got); diff != "" {
		t.Errorf("LoadStates after a second save (-want +got):\n%s", diff)
	}
	if len(got) > 0 && got[0].InCycle() {
		t.Error("a cleared cycle is still in flight")
	}
	if err := wh.SaveStates(ctx(t), nil); err != nil {
		t.Errorf("SaveStates of nothing: %v", err)
	}
	all, err := wh.LoadStates(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(all, func(a, b pipeline.StreamState) int {
		if a.SurveyID != b.SurveyID {
			return int(a.SurveyID - b.SurveyID)
		}
		return strings.Compare(a.Stream, b.Stream)
	}) {
		t.Errorf("LoadStates is not ordered by survey and stream: %v", all)
	}
}

// testSurveys: surveys read back as saved; a later save of one replaces
// it and leaves the others.
func testSurveys(t *testing.T, s *suite) {
	wh := s.wh
	launched := base.Add(-24 * time.Hour)
	ended := base
	saved := []pipeline.SurveyInfo{
		{SurveyID: surveyStates, Name: "Spokojenost zákazníků", LaunchedAt: &launched, FirstSeen: base, LastSeen: base},
		{SurveyID: surveyStates + 1, Name: "Druhý", FirstSeen: base, LastSeen: base},
	}
	if err := wh.SaveSurveys(ctx(t), saved); err != nil {
		t.Fatal(err)
	}
	load := func() []pipeline.SurveyInfo {
		t.Helper()
		all, err := wh.LoadSurveys(ctx(t))
		return only(t, "LoadSurveys", all, err, func(si pipeline.SurveyInfo) bool {
			return si.SurveyID == surveyStates || si.SurveyID == surveyStates+1
		})
	}
	if diff := cmp.Diff(saved, load()); diff != "" {
		t.Errorf("LoadSurveys (-want +got):\n%s", diff)
	}
	next := saved[0]
	next.Name, next.EndedAt, next.LastSeen = "Spokojenost zákazníků 2026", &ended, base.Add(time.Hour)
	if err := wh.SaveSurveys(ctx(t), []pipeline.SurveyInfo{next}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]pipeline.SurveyInfo{next, saved[1]}, load()); diff != "" {
		t.Errorf("LoadSurveys after a second save (-want +got):\n%s", diff)
	}
}

// testRejects: reject records are written (twice harmlessly), and
// RejectedResponses returns the responses rejected when a list showed
// them and not written since, with the latest such list's status.
func testRejects(t *testing.T, s *suite) {
	wh := s.wh
	at := base.Add(30*time.Minute + time.Second)
	rej := func(n int, status string, at time.Time) pipeline.Reject {
		return pipeline.Reject{SurveyID: surveyRejects, ResponseID: survey.GUID(guid(surveyRejects, n)), Stage: pipeline.StageFetch,
			Reason: "date_out_of_range", Error: "date_created: rok 0000", Source: "poll", RejectedAt: at, ListedStatus: status}
	}
	rejects := []pipeline.Reject{
		rej(1, survey.StatusCompleted, at),                     // rejected, never written
		rej(2, survey.StatusPartial, at),                       // rejected twice: the latest status wins
		rej(2, survey.StatusDisqualified, at.Add(time.Minute)), //
		rej(3, survey.StatusCompleted, at),                     // written after the reject: the write wins
		rej(4, survey.StatusCompleted, at.Add(time.Hour)),      // written, then rejected: the reject wins
		rej(5, "", at),                   // a webhook's: no list status
		rej(6, survey.StatusPartial, at), // deleted after the reject: the deletion wins
		{SurveyID: surveyRejects2, ResponseID: survey.GUID(guid(surveyRejects2, 7)), Stage: pipeline.StageFlatten, Reason: "decode", Source: "poll",
			RejectedAt: at, ListedStatus: survey.StatusCompleted},
	}
	for range 2 {
		if err := wh.WriteRejects(ctx(t), rejects); err != nil {
			t.Fatal(err)
		}
	}
	// The same response named in upper case by a later list.
	if err := wh.WriteRejects(ctx(t), []pipeline.Reject{{SurveyID: surveyRejects, ResponseID: survey.GUID(strings.ToUpper(guid(surveyRejects, 1))),
		Stage: pipeline.StageFetch, Reason: "decode", Source: "poll", RejectedAt: at.Add(2 * time.Minute), ListedStatus: survey.StatusQuotaFull}}); err != nil {
		t.Fatal(err)
	}
	if err := wh.WriteRejects(ctx(t), nil); err != nil {
		t.Errorf("WriteRejects of nothing: %v", err)
	}
	write(t, wh,
		resp{survey: surveyRejects, n: 3, version: uint64(at.Add(2 * time.Second).UnixNano())},
		resp{survey: surveyRejects, n: 4, version: uint64(at.UnixNano())},
	)
	write(t, wh, resp{survey: surveyRejects, n: 6, version: uint64(at.Add(2 * time.Second).UnixNano()), deleted: true})
	ri, ok := wh.Inventory().(warehouse.RejectInventory)
	if !ok {
		return // testParts holds the backend to its choice
	}
	got, err := ri.RejectedResponses(ctx(t), surveyRejects)
	if err != nil {
		t.Fatal(err)
	}
	lower := map[string]string{}
	for id, st := range got {
		lower[strings.ToLower(string(id))] = st
	}
	want := map[string]string{
		guid(surveyRejects, 1): survey.StatusQuotaFull,
		guid(surveyRejects, 2): survey.StatusDisqualified,
		guid(surveyRejects, 4): survey.StatusCompleted,
	}
	if diff := cmp.Diff(want, lower); diff != "" {
		t.Errorf("RejectedResponses (-want +got):\n%s", diff)
	}
	if got, err := ri.RejectedResponses(ctx(t), surveyRejects2); err != nil || !maps.Equal(got, map[survey.GUID]string{survey.GUID(guid(surveyRejects2, 7)): survey.StatusCompleted}) {
		t.Errorf("RejectedResponses of the other survey = %v, %v", got, err)
	}
	if got, err := ri.RejectedResponses(ctx(t), surveyRejects+100); err != nil || len(got) != 0 {
		t.Errorf("RejectedResponses of a survey without rejects = %v, %v", got, err)
	}
}

// testFileIndex: the newest version of a file wins (an older one recorded
// late is ignored), Pending lists the live files not stored yet oldest
// attempt first, and FilesOf a response's files at their latest version.
func testFileIndex(t *testing.T, s *suite) {
	c := ctx(t)
	idx, err := s.wh.FileIndex()
	if err != nil {
		t.Fatal(err)
	}
	ref := func(n, f int) files.FileRef {
		return files.FileRef{SurveyID: surveyFiles, ResponseID: survey.GUID(guid(surveyFiles, n)), QuestionID: qUpload, FileID: fileID(surveyFiles, f)}
	}
	at := base.Add(-time.Hour) // older than the other tests' attempts
	failed := func(r files.FileRef, attempts int, at time.Time, v uint64) files.Record {
		return files.Record{FileRef: r, ObjectURL: "file:///srv/prilohy/" + r.Key(), FileName: "smlouva č. 1.pdf",
			Error: "HTTP 503", Attempts: attempts, StoredAt: at, Version: v}
	}
	stored := func(r files.FileRef, at time.Time, v uint64) files.Record {
		return files.Record{FileRef: r, ObjectURL: "s3://prilohy/" + r.Key(), FileName: "smlouva č. 1.pdf", ContentType: "application/pdf",
			Size: 12345, SHA256: strings.Repeat("ab", 32), StoredAt: at, Version: v}
	}
	if err := idx.Record(c, []files.Record{
		failed(ref(1, 1), 1, at.Add(2*time.Second), 10),
		failed(ref(1, 2), 3, at.Add(time.Second), 10),
		stored(ref(2, 3), at, 10),
		failed(ref(3, 4), 1, at.Add(3*time.Second), 10),
	}); err != nil {
		t.Fatal(err)
	}
	pending := func(limit int) []files.FileRef {
		t.Helper()
		recs, err := idx.Pending(c, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []files.FileRef
		for _, r := range recs {
			if r.SurveyID == surveyFiles {
				out = append(out, r.FileRef)
			}
		}
		return out
	}
	if diff := cmp.Diff([]files.FileRef{ref(1, 2), ref(1, 1), ref(3, 4)}, pending(100)); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	if got := pending(1); len(got) != 1 || got[0] != ref(1, 2) {
		t.Errorf("Pending(1) = %v, want the oldest attempt %v", got, ref(1, 2))
	}
	// File 1 is stored at last; file 2's stored version comes late, older
	// than its failure: ignored; file 4's response is deleted.
	if err := idx.Record(c, []files.Record{stored(ref(1, 1), at.Add(time.Minute), 20), stored(ref(1, 2), at.Add(time.Minute), 5)}); err != nil {
		t.Fatal(err)
	}
	del := failed(ref(3, 4), 1, at.Add(time.Minute), 20)
	del.Deleted = true
	if err := idx.Record(c, []files.Record{del}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]files.FileRef{ref(1, 2)}, pending(100)); diff != "" {
		t.Errorf("Pending after the stored and deleted versions (-want +got):\n%s", diff)
	}
	got, err := idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 1)))
	if err != nil {
		t.Fatal(err)
	}
	want := []files.Record{stored(ref(1, 1), at.Add(time.Minute), 20), failed(ref(1, 2), 3, at.Add(time.Second), 10)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FilesOf (-want +got):\n%s", diff)
	}
	if got, err := idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 404))); err != nil || len(got) != 0 {
		t.Errorf("FilesOf a response without files = %v, %v", got, err)
	}
	// A deleted file: its latest version says so.
	got, err = idx.FilesOf(c, surveyFiles, survey.GUID(guid(surveyFiles, 3)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]files.Record{del}, got); diff != "" {
		t.Errorf("FilesOf a deleted response (-want +got):\n%s", diff)
	}
	if err := idx.Record(c, nil); err != nil {
		t.Errorf("Record of nothing: %v", err)
	}
}

// The feed ledger's states (source/feed's, which this package does not
// import).
const (
	stIntent    = "intent"
	stPushed    = "pushed"
	stFailed    = "failed"
	stUncertain = "uncertain"
	stReleased  = "released"
	sendSent    = "sent"
)

// contactKey is a ledger row's key: a feed's key within a distribution.
type contactKey struct {
	dist int64
	key  string
}

// contacts loads feed's entries and keeps, per key, the one with the
// highest version: what a reader of the ledger acts on (a ledger may call
// fn with every entry, in the order recorded, or only the latest).
func contacts(t *testing.T, wh warehouse.Warehouse, feed string) map[contactKey]record.ContactEntry {
	t.Helper()
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	out := map[contactKey]record.ContactEntry{}
	if err := l.LoadContacts(ctx(t), feed, func(e record.ContactEntry) error {
		if e.Feed != feed {
			t.Errorf("LoadContacts(%s) called fn with an entry of feed %s", feed, e.Feed)
		}
		k := contactKey{e.DistributionID, e.Key}
		if prev, ok := out[k]; !ok || e.Version >= prev.Version {
			out[k] = e
		}
		return nil
	}); err != nil {
		t.Fatalf("LoadContacts(%s): %v", feed, err)
	}
	return out
}

// sends loads feed's send entries, the highest version per batch.
func sends(t *testing.T, wh warehouse.Warehouse, feed string) map[string]record.SendEntry {
	t.Helper()
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]record.SendEntry{}
	if err := l.LoadSends(ctx(t), feed, func(e record.SendEntry) error {
		if prev, ok := out[e.BatchID]; !ok || e.Version >= prev.Version {
			out[e.BatchID] = e
		}
		return nil
	}); err != nil {
		t.Fatalf("LoadSends(%s): %v", feed, err)
	}
	return out
}

// ledgerEntries are the entries testFeedLedger records in feed "suite":
// intents and their results, releases, a key in two distributions, and a
// release recorded after a next leader's intent of the same key.
func ledgerEntries() (recorded [][]record.ContactEntry, want map[contactKey]record.ContactEntry) {
	at := base.Truncate(time.Second)
	e := func(key string, dist int64, state string, v uint64) record.ContactEntry {
		return record.ContactEntry{Feed: "suite", Key: key, DistributionID: dist, State: state, BatchID: "b1",
			File: "kontakty-2026-11-22.csv", Line: int64(v), UpdatedAt: at.Add(time.Duration(v) * time.Second), Version: v}
	}
	pushed := e("jana@example.cz", 1, stPushed, 2)
	pushed.ContactID, pushed.SurveyURL = 6001, "https://example.click4survey.cz/s/abc"
	failed := e("petr@example.cz", 1, stFailed, 2)
	failed.Error = "HTTP 422: neplatný e-mail"
	released := e("eva@example.cz", 1, stReleased, 2)
	released.Error = "not pushed: this daemon lost the lead"
	leaderB := e("adam@example.cz", 1, stIntent, 20)
	leaderB.BatchID = "b2"
	recorded = [][]record.ContactEntry{
		{e("jana@example.cz", 1, stIntent, 1), e("petr@example.cz", 1, stIntent, 1), e("eva@example.cz", 1, stIntent, 1),
			e("ota@example.cz", 1, stIntent, 1), e("jana@example.cz", 2, stIntent, 1), e("adam@example.cz", 1, stIntent, 10)},
		{pushed, failed, released, e("jana@example.cz", 2, stUncertain, 2)},
		// A next leader's intent, then the former leader's late release of
		// its own (version 11): the next leader's stands.
		{leaderB},
		{e("adam@example.cz", 1, stReleased, 11)},
	}
	want = map[contactKey]record.ContactEntry{
		{1, "jana@example.cz"}: pushed,
		{1, "petr@example.cz"}: failed,
		{1, "eva@example.cz"}:  released,
		{1, "ota@example.cz"}:  e("ota@example.cz", 1, stIntent, 1), // open
		{2, "jana@example.cz"}: e("jana@example.cz", 2, stUncertain, 2),
		{1, "adam@example.cz"}: leaderB,
	}
	return recorded, want
}

// testFeedLedger: contact and send entries read back as recorded, the
// highest version of each key wins, feeds are apart.
func testFeedLedger(t *testing.T, s *suite) {
	wh := s.wh
	l, err := wh.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	recorded, want := ledgerEntries()
	for _, es := range recorded {
		if err := l.RecordContacts(ctx(t), es); err != nil {
			t.Fatal(err)
		}
	}
	other := record.ContactEntry{Feed: "suite_other", Key: "jana@example.cz", DistributionID: 1, State: stPushed, ContactID: 9,
		BatchID: "x", UpdatedAt: base, Version: 1}
	if err := l.RecordContacts(ctx(t), []record.ContactEntry{other}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, contacts(t, wh, "suite"), cmp.AllowUnexported(contactKey{})); diff != "" {
		t.Errorf("LoadContacts (-want +got):\n%s", diff)
	}
	if got := contacts(t, wh, "suite_other"); len(got) != 1 || got[contactKey{1, "jana@example.cz"}] != other {
		t.Errorf("LoadContacts of the other feed: %v", got)
	}
	if got := contacts(t, wh, "suite_none"); len(got) != 0 {
		t.Errorf("LoadContacts of a feed never recorded: %v", got)
	}

	sched := base.Add(24 * time.Hour)
	sendAt := base.Truncate(time.Second)
	for _, e := range sendEntries(sched, sendAt) {
		if err := l.RecordSend(ctx(t), e); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(wantSends(sched, sendAt), sends(t, wh, "suite")); diff != "" {
		t.Errorf("LoadSends (-want +got):\n%s", diff)
	}
	if got := sends(t, wh, "suite_other"); len(got) != 0 {
		t.Errorf("LoadSends of a feed without sends: %v", got)
	}
}

func sendEntries(sched, at time.Time) []record.SendEntry {
	return []record.SendEntry{
		{Feed: "suite", BatchID: "b1", DistributionID: 1, State: stIntent, At: at, Version: 1},
		{Feed: "suite", BatchID: "b1", DistributionID: 1, MessageID: 55, State: sendSent, ScheduledDate: &sched, Contacts: 3, Pending: 1, Sent: 2, Bounces: 0, At: at.Add(time.Second), Version: 2},
		{Feed: "suite", BatchID: "b2", DistributionID: 1, State: stIntent, At: at, Version: 1},
		{Feed: "suite", BatchID: "b2", DistributionID: 1, State: stReleased, Error: "not sent: this daemon lost the lead", At: at.Add(time.Second), Version: 2},
	}
}

func wantSends(sched, at time.Time) map[string]record.SendEntry {
	es := sendEntries(sched, at)
	return map[string]record.SendEntry{"b1": es[1], "b2": es[3]}
}

// testVerify: what verification reads (warehouse.VerifyReader) — counts
// of current responses by status and date range with their split date,
// ids, samples and contents — from a reader opened after the writes.
func testVerify(t *testing.T, s *suite) {
	wh := s.wh
	c := ctx(t)
	r := func(n int, status string, created time.Time, v int) resp {
		return resp{survey: surveyVerify, n: n, status: status, created: created, version: version(v)}
	}
	write(t, wh,
		r(1, "", base, 1),                // completed base+1m
		r(2, "", base.Add(time.Hour), 1), // completed base+1h1m
		r(3, survey.StatusPartial, base.Add(2*time.Hour+700*time.Millisecond), 1), // started at 2h and 0.7s
		r(4, survey.StatusDisqualified, base.Add(30*time.Minute), 1),              // no completion: dated by its start
		r(5, "", base, 1),
		r(6, "", base.Add(3*time.Hour), 1),
	)
	write(t, wh, resp{survey: surveyVerify, n: 5, deleted: true, version: version(2)}, // not current
		resp{survey: surveyVerify, n: 6, created: base.Add(3 * time.Hour), essay: "druhá verze", version: version(2)})
	write(t, wh, resp{survey: surveyVerify2, n: 7, version: version(1)}) // another survey's is not counted
	vr := wh.Verifier()
	if vr == nil {
		t.Fatal("Verifier is nil")
	}
	completed := []string{survey.StatusCompleted}
	for _, tc := range []struct {
		name string
		r    warehouse.Range
		want warehouse.RangeCount
	}{
		{"completed", warehouse.Range{SurveyID: surveyVerify, Statuses: completed},
			warehouse.RangeCount{N: 3, Mid: base.Add(time.Hour + time.Minute)}},
		{"completed before the split", warehouse.Range{SurveyID: surveyVerify, Statuses: completed, To: base.Add(time.Hour + time.Minute)},
			warehouse.RangeCount{N: 1, Mid: base.Add(time.Minute)}},
		{"completed from the split", warehouse.Range{SurveyID: surveyVerify, Statuses: completed, From: base.Add(time.Hour + time.Minute)},
			warehouse.RangeCount{N: 2, Mid: base.Add(3*time.Hour + time.Minute)}},
		{"completed and disqualified", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusCompleted, survey.StatusDisqualified}},
			warehouse.RangeCount{N: 4, Mid: base.Add(time.Hour + time.Minute)}},
		{"partial, by start, to the second", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusPartial}, Started: true,
			From: base.Add(2 * time.Hour), To: base.Add(2*time.Hour + time.Second)}, warehouse.RangeCount{N: 1, Mid: base.Add(2 * time.Hour)}},
		{"partial, after its second", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusPartial}, Started: true,
			From: base.Add(2*time.Hour + time.Second)}, warehouse.RangeCount{}},
		{"none", warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusQuotaFull}}, warehouse.RangeCount{}},
	} {
		got, err := vr.Count(c, tc.r)
		if err != nil {
			t.Fatalf("Count %s: %v", tc.name, err)
		}
		if got.N != tc.want.N || !got.Mid.Equal(tc.want.Mid) {
			t.Errorf("Count %s = %d, mid %v; want %d, mid %v", tc.name, got.N, got.Mid, tc.want.N, tc.want.Mid)
		}
	}

	ids, err := vr.IDs(c, warehouse.Range{SurveyID: surveyVerify, Statuses: []string{survey.StatusCompleted, survey.StatusDisqualified}, From: base.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{guid(surveyVerify, 1): survey.StatusCompleted, guid(surveyVerify, 2): survey.StatusCompleted,
		guid(surveyVerify, 4): survey.StatusDisqualified, guid(surveyVerify, 6): survey.StatusCompleted}
	if got := lowerKeys(ids); !maps.Equal(got, want) {
		t.Errorf("IDs = %v, want %v", got, want)
	}

	all := []string{guid(surveyVerify, 1), guid(surveyVerify, 2), guid(surveyVerify, 3), guid(surveyVerify, 4), guid(surveyVerify, 6)}
	sample := func(n int) []string {
		t.Helper()
		got, err := vr.Sample(c, surveyVerify, n)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(got))
		for i, id := range got {
			out[i] = strings.ToLower(string(id))
		}
		slices.Sort(out)
		return out
	}
	if got := sample(100); !slices.Equal(got, all) {
		t.Errorf("Sample(100) = %v, want every current response %v", got, all)
	}
	got := sample(2)
	if len(got) != 2 || got[0] == got[1] || !slices.Contains(all, got[0]) || !slices.Contains(all, got[1]) {
		t.Errorf("Sample(2) = %v, want two current responses", got)
	}

	contents, err := vr.Content(c, surveyVerify, []survey.GUID{survey.GUID(guid(surveyVerify, 6)), survey.GUID(guid(surveyVerify, 5)),
		survey.GUID(guid(surveyVerify, 404))})
	if err != nil {
		t.Fatal(err)
	}
	six := warehouse.Content{Status: survey.StatusCompleted, Created: base.Add(3 * time.Hour), Completed: base.Add(3*time.Hour + time.Minute),
		Answers: []warehouse.Answer{
			{PageID: 1, QuestionID: qChoice, ChoiceID: warehouse.OptInt{V: 1, Valid: true}},
			{PageID: 1, QuestionID: qEssay, Text: "druhá verze"},
			{PageID: 1, QuestionID: qScale, Value: warehouse.OptInt{V: 9, Valid: true}},
		}}
	gotContents := map[string]warehouse.Content{}
	for id, ct := range contents {
		gotContents[strings.ToLower(string(id))] = ct
	}
	if diff := cmp.Diff(map[string]warehouse.Content{guid(surveyVerify, 6): six}, gotContents); diff != "" {
		t.Errorf("Content (-want +got):\n%s", diff)
	}
	if ct := gotContents[guid(surveyVerify, 6)]; !ct.Equal(six) {
		t.Error("Content.Equal says the contents differ")
	}
}

func lowerKeys(m map[survey.GUID]string) map[string]string {
	out := make(map[string]string, len(m))
	for id, v := range m {
		out[strings.ToLower(string(id))] = v
	}
	return out
}

// testVerifyLog: passes read back per survey — the latest pass, the latest
// clean one, the latest row of each stream — ordered by survey id.
func testVerifyLog(t *testing.T, s *suite) {
	vl := s.wh.VerifyLog()
	if vl == nil {
		t.Fatal("VerifyLog is nil")
	}
	c := ctx(t)
	at := base.Add(time.Hour)
	run := func(surveyID int64, stream string, pass int, result, passResult string) warehouse.VerifyRun {
		start := at.Add(time.Duration(pass) * time.Hour)
		r := warehouse.VerifyRun{SurveyID: surveyID, Stream: stream, Method: warehouse.VerifyCounts, StartedAt: start,
			FinishedAt: start.Add(time.Minute), Service: 100, Warehouse: 100, Sampled: 5, Result: result, PassResult: passResult, APICalls: 4}
		if result == warehouse.VerifyDrift {
			r.Warehouse, r.Missing, r.Repaired = 98, 2, 2
		}
		return r
	}
	passes := [][]warehouse.VerifyRun{
		{run(surveyVerify, "completed", 0, warehouse.VerifyClean, warehouse.VerifyClean), run(surveyVerify, "partial", 0, warehouse.VerifyClean, warehouse.VerifyClean)},
		{run(surveyVerify, "completed", 1, warehouse.VerifyDrift, warehouse.VerifyDrift), run(surveyVerify, "partial", 1, warehouse.VerifyClean, warehouse.VerifyDrift),
			run(surveyVerify2, "completed", 1, warehouse.VerifyDrift, warehouse.VerifyDrift)},
	}
	for _, p := range passes {
		if err := vl.RecordVerifyRuns(c, p); err != nil {
			t.Fatal(err)
		}
	}
	all, err := vl.VerifyStates(c)
	if err != nil {
		t.Fatal(err)
	}
	var got []warehouse.VerifyState
	for _, st := range all {
		if st.SurveyID == surveyVerify || st.SurveyID == surveyVerify2 {
			slices.SortFunc(st.Latest, func(a, b warehouse.VerifyRun) int { return strings.Compare(a.Stream, b.Stream) })
			got = append(got, st)
		}
	}
	want := []warehouse.VerifyState{
		{SurveyID: surveyVerify, LastPass: passes[1][0].FinishedAt, LastClean: passes[0][0].FinishedAt, Result: warehouse.VerifyDrift,
			Latest: passes[1][:2]},
		{SurveyID: surveyVerify2, LastPass: passes[1][2].FinishedAt, Result: warehouse.VerifyDrift, Latest: passes[1][2:]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VerifyStates (-want +got):\n%s", diff)
	}
	if !slices.IsSortedFunc(all, func(a, b warehouse.VerifyState) int { return int(a.SurveyID - b.SurveyID) }) {
		t.Error("VerifyStates is not ordered by survey id")
	}
}

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
