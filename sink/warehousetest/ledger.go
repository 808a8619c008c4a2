package warehousetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
)

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
