package feed_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/chtest"
	"github.com/surveysync/surveysync/internal/testkit/feedtest"
	chsink "github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
)

// openCH opens the ClickHouse sink on a fresh database (dropped after the
// test), or skips without SURVEYSYNC_TEST_CLICKHOUSE_ADDR.
func openCH(t testing.TB) *chsink.Sink {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	o, ok := chtest.Options("test_feed_" + hex.EncodeToString(b[:]))
	if !ok {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := chsink.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := chtest.DropDatabase(ctx, s); err != nil {
			t.Errorf("drop %s: %v", s.Database(), err)
		}
		s.Close()
	})
	return s
}

func TestClickHouseLedger(t *testing.T) {
	s := openCH(t)
	l := chsink.NewFeedLedger(s)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	rec := func(key, state string, v uint64) feed.ContactEntry {
		return feed.ContactEntry{Feed: "crm", Key: key, DistributionID: 7, State: state, BatchID: "b1", File: "f.csv",
			Line: int64(v), UpdatedAt: now, Version: v}
	}
	if err := l.RecordContacts(ctx, []feed.ContactEntry{rec("k1", feed.StateIntent, 1), rec("k2", feed.StateIntent, 2), rec("k3", feed.StateIntent, 3)}); err != nil {
		t.Fatal(err)
	}
	p := rec("k1", feed.StatePushed, 10)
	p.ContactID, p.SurveyURL = 554784, "https://www.click4survey.cz/m4/3177/x"
	f := rec("k2", feed.StateFailed, 11)
	f.Error = "HTTP 400: Invalid e-mail"
	other := rec("k1", feed.StatePushed, 12)
	other.Feed = "other"
	if err := l.RecordContacts(ctx, []feed.ContactEntry{p, f, other}); err != nil {
		t.Fatal(err)
	}
	got := map[string]feed.ContactEntry{}
	if err := l.LoadContacts(ctx, "crm", func(e feed.ContactEntry) error { got[e.Key] = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["k1"].State != feed.StatePushed || got["k1"].ContactID != 554784 || got["k1"].SurveyURL == "" ||
		got["k2"].State != feed.StateFailed || got["k2"].Error == "" || got["k3"].State != feed.StateIntent ||
		got["k3"].Line != 3 || got["k3"].File != "f.csv" || !got["k3"].UpdatedAt.Equal(now) {
		t.Fatalf("loaded %+v", got)
	}
	sched := now.Add(time.Hour)
	if err := l.RecordSend(ctx, feed.SendEntry{Feed: "crm", BatchID: "b1", DistributionID: 7, MessageID: 9, State: feed.SendIntent, ScheduledDate: &sched, Contacts: 1, At: now, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordSend(ctx, feed.SendEntry{Feed: "crm", BatchID: "b1", DistributionID: 7, MessageID: 9, State: feed.SendSent, ScheduledDate: &sched, Contacts: 1, Pending: 5, Sent: 3, Bounces: 1, At: now, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordSend(ctx, feed.SendEntry{Feed: "crm", BatchID: "b2", DistributionID: 7, MessageID: 9, State: feed.SendIntent, At: now, Version: 3}); err != nil {
		t.Fatal(err)
	}
	sends := map[string]feed.SendEntry{}
	if err := l.LoadSends(ctx, "crm", func(e feed.SendEntry) error { sends[e.BatchID] = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if b1 := sends["b1"]; len(sends) != 2 || b1.State != feed.SendSent || b1.Pending != 5 || b1.Bounces != 1 ||
		b1.ScheduledDate == nil || !b1.ScheduledDate.Equal(sched) || sends["b2"].ScheduledDate != nil {
		t.Fatalf("sends %+v", sends)
	}

	// 100k keys load fast.
	const n = 100000
	batch := make([]feed.ContactEntry, 0, 10000)
	for i := 0; i < n; i++ {
		e := rec(fmt.Sprintf("key-%06d", i), feed.StatePushed, uint64(100+i))
		e.Feed, e.ContactID, e.SurveyURL = "big", int64(i), "https://www.click4survey.cz/m4/3177/"+fmt.Sprint(i)
		batch = append(batch, e)
		if len(batch) == cap(batch) {
			if err := l.RecordContacts(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	// Latency of the small inserts the feed does per chunk (100 rows).
	small := make([]feed.ContactEntry, 100)
	const rounds = 30
	t0 := time.Now()
	for r := 0; r < rounds; r++ {
		for i := range small {
			small[i] = rec(fmt.Sprintf("lat-%d-%d", r, i), feed.StateIntent, uint64(1e6+r*100+i))
			small[i].Feed = "latency"
		}
		if err := l.RecordContacts(ctx, small); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("100-row insert: %v on average", time.Since(t0)/rounds)
	start := time.Now()
	count := 0
	if err := l.LoadContacts(ctx, "big", func(feed.ContactEntry) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("loaded %d keys in %v", count, took)
	if count != n || took > 10*time.Second {
		t.Fatalf("loaded %d keys in %v", count, took)
	}
}

func TestQueryFeedPicksOnlyNewRows(t *testing.T) {
	s := openCH(t)
	ctx := context.Background()
	table := s.Database() + ".customers"
	if err := s.Conn().Exec(ctx, "CREATE TABLE "+table+" (id UInt32, email String, name Nullable(String), created DateTime('UTC')) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	insert := func(from, to int) {
		b, err := s.Conn().PrepareBatch(ctx, "INSERT INTO "+table+" (id, email, name, created)")
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			var name *string
			if i%2 == 0 {
				n := fmt.Sprintf("Zákazník %d", i)
				name = &n
			}
			email := fmt.Sprintf("zakaznik%d@example.cz", i)
			if i == 13 {
				email = "broken"
			}
			if err := b.Append(uint32(i), email, name, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
	}
	insert(0, 100)
	svc := feedtest.Start()
	defer svc.Close()
	o := feed.Options{Name: "yesterday", Type: feed.TypeClickHouseQuery, DistributionID: dist, Channel: feed.ChannelEmail,
		Mapping:         map[string]string{"email": "email", "first_name": "name", "import_number": "id", "user_field1": "id"},
		DedupeKey:       "id",
		ClickHouseQuery: feed.QueryOptions{Query: "SELECT id, email, name, created FROM " + table + " ORDER BY id", Conn: s.QueryConn()},
		Send:            feed.SendOptions{MessageID: 4},
	}
	r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
		Ledger: chsink.NewFeedLedger(s), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx, "yesterday"); err != nil {
		t.Fatal(err)
	}
	if n := len(svc.Contacts(dist)); n != 99 {
		t.Fatalf("first run: %d contacts, want 99 (row 13 is invalid)", n)
	}
	insert(100, 150)
	if err := r.RunOnce(ctx, "yesterday"); err != nil {
		t.Fatal(err)
	}
	if err := r.RunOnce(ctx, "yesterday"); err != nil { // nothing new
		t.Fatal(err)
	}
	got := pushedIDs(t, svc)
	if len(got) != 149 {
		t.Fatalf("%d distinct contacts, want 149", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("id %s pushed %d times", id, n)
		}
	}
	if n := len(svc.Sends()); n != 2 {
		t.Fatalf("sends %d, want 2 (the third run pushed nothing)", n)
	}
	var pushed, sent uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.Database()+".pushed_contacts FINAL WHERE feed = 'yesterday' AND state = 'pushed'").Scan(&pushed); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.Database()+".message_sends FINAL WHERE feed = 'yesterday' AND state = 'sent'").Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if pushed != 149 || sent != 2 {
		t.Fatalf("pushed_contacts %d pushed, message_sends %d sent", pushed, sent)
	}
	// A fresh runner (a restart) loads the ledger from ClickHouse and pushes nothing.
	r2, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
		Ledger: chsink.NewFeedLedger(s)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytesBuffer
	if err := r2.DryRun(ctx, "yesterday", &out); err != nil {
		t.Fatal(err)
	}
	if !contains(out.String(), "would push 0, skip 149") {
		t.Fatalf("dry run after restart:\n%s", out.String())
	}
}

func TestCSVWithClickHouseLedger(t *testing.T) {
	s := openCH(t)
	svc := feedtest.Start()
	defer svc.Close()
	svc.FaultFor = func(n int64) feedtest.Fault {
		if n%4 == 0 {
			return feedtest.TooMany
		}
		return feedtest.None
	}
	dir := t.TempDir()
	o := csvFeed(dir)
	o.Concurrency = 16
	o.ChunkRows = 500
	r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
		Ledger: chsink.NewFeedLedger(s)})
	if err != nil {
		t.Fatal(err)
	}
	good, bad := genCSV(t, filepath.Join(dir, "k.csv"), 10000, true)
	ctx := context.Background()
	if err := r.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	genCSV(t, filepath.Join(dir, "k.csv"), 10000, true)
	if err := r.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	reps := report(t, dir, "done")
	if len(reps) != 2 || reps[0].Summary.Invalid != int64(len(bad)) || reps[1].Summary.Pushed != 0 {
		t.Fatalf("reports %+v / %+v", reps[0].Summary, reps[1].Summary)
	}
	var pushed uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+s.Database()+".pushed_contacts FINAL WHERE feed = 'crm' AND state = 'pushed'").Scan(&pushed); err != nil {
		t.Fatal(err)
	}
	if pushed != uint64(len(good)) || len(svc.Sends()) != 1 {
		t.Fatalf("pushed_contacts %d (want %d), sends %d", pushed, len(good), len(svc.Sends()))
	}
}

type bytesBuffer = bytes.Buffer

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestReleaseUndoesOnlyItsIntent: a release (a daemon that recorded
// intents and lost the lead before calling) lets the next leader push the
// row, but never overrides what a next leader recorded after the intent,
// even when the release reaches the ledger last: a row it marked
// uncertain stays held, a row it pushed stays pushed. On both ledgers:
// ClickHouse orders by version, the file ledger keeps recording order.
func TestReleaseUndoesOnlyItsIntent(t *testing.T) {
	for _, backend := range []string{"file", "clickhouse"} {
		t.Run(backend, func(t *testing.T) {
			var l feed.Ledger
			if backend == "clickhouse" {
				l = chsink.NewFeedLedger(openCH(t))
			} else {
				fl, err := parquet.NewFileLedger(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { fl.Close() })
				l = fl
			}
			ctx := context.Background()
			at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
			v := uint64(at.UnixNano())
			rec := func(key, state string, v uint64) feed.ContactEntry {
				return feed.ContactEntry{Feed: "crm", Key: key, DistributionID: dist, State: state, BatchID: "file:old", UpdatedAt: at, Version: v}
			}
			steps := [][]feed.ContactEntry{
				{rec("C000001", feed.StateIntent, v), rec("C000002", feed.StateIntent, v+1), rec("C000003", feed.StateIntent, v+2)},
				{rec("C000001", feed.StateReleased, v+1)},    // released in time
				{rec("C000002", feed.StateUncertain, v+5e9)}, // the next leader read the intent first
				{rec("C000003", feed.StateIntent, v+5e9)},    // the next leader read the ledger before the intent…
				{rec("C000003", feed.StatePushed, v+6e9)},    // …and pushed the row itself
				{rec("C000002", feed.StateReleased, v+2)},    // the old leader's late releases
				{rec("C000003", feed.StateReleased, v+3)},
				{rec("C000005", feed.StateIntent, v+3)},   // the old leader's intent…
				{rec("C000005", feed.StateIntent, v+5e9)}, // …a next leader that read the ledger before it, and died
				{rec("C000005", feed.StateReleased, v+4)}, // the old leader's late release
			}
			for _, es := range steps {
				if err := l.RecordContacts(ctx, es); err != nil {
					t.Fatal(err)
				}
			}
			svc := feedtest.Start()
			defer svc.Close()
			dir := t.TempDir()
			genCSV(t, filepath.Join(dir, "a.csv"), 5, false)
			r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{csvFeed(dir)}, API: newClient(t, svc.URL(), 5*time.Second),
				Ledger: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.RunOnce(ctx, "crm"); err != nil {
				t.Fatal(err)
			}
			got := pushedIDs(t, svc)
			if len(got) != 2 || got["C000001"] != 1 || got["C000004"] != 1 {
				t.Errorf("pushed %v, want C000001 and C000004 once", got)
			}
			rep := report(t, dir, "done")
			if len(rep) != 1 || rep[0].Summary.Pushed != 2 || rep[0].Summary.Uncertain != 2 || rep[0].Summary.Skipped != 1 {
				t.Fatalf("report %+v", rep)
			}
			unc, err := r.Uncertain(ctx, "crm")
			if err != nil || len(unc) != 2 || unc[0].Key != "C000002" || unc[1].Key != "C000005" {
				t.Fatalf("Uncertain: %+v, %v", unc, err)
			}
		})
	}
}

// TestQueryFeedIsReadOnly: the query of a clickhouse_query feed runs with
// readonly = 2 on the daemon's read-write connection: a query that writes,
// changes a table or lowers readonly is refused by the real ClickHouse
// (code 164) and changes nothing, while a SELECT with its own SETTINGS
// still runs.
func TestQueryFeedIsReadOnly(t *testing.T) {
	s := openCH(t)
	ctx := context.Background()
	table := s.Database() + ".customers"
	if err := s.Conn().Exec(ctx, "CREATE TABLE "+table+" (id UInt32, email String) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if err := s.Conn().Exec(ctx, "INSERT INTO "+table+" SELECT number, concat('zakaznik', toString(number), '@example.cz') FROM system.numbers LIMIT 10"); err != nil {
		t.Fatal(err)
	}
	svc := feedtest.Start()
	defer svc.Close()
	hostile := []string{
		"INSERT INTO " + table + " SELECT 99, 'x@example.cz'",
		"DROP TABLE " + table,
		"ALTER TABLE " + table + " DELETE WHERE 1",
		"CREATE TABLE " + s.Database() + ".stolen ENGINE = Memory AS SELECT * FROM " + table,
		"TRUNCATE TABLE " + table,
		"SELECT id, email FROM " + table + " SETTINGS readonly = 0",
	}
	run := func(query string) error {
		o := feed.Options{Name: "q", Type: feed.TypeClickHouseQuery, DistributionID: dist, Channel: feed.ChannelEmail,
			Mapping: map[string]string{"email": "email", "user_field1": "id"}, DedupeKey: "id",
			ClickHouseQuery: feed.QueryOptions{Query: query, Conn: s.QueryConn()}}
		r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
			Ledger: chsink.NewFeedLedger(s), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return r.RunOnce(ctx, "q")
	}
	for _, q := range hostile {
		err := run(q)
		if err == nil || !strings.Contains(err.Error(), "readonly mode") {
			t.Errorf("%s: %v, want a readonly refusal", q, err)
		}
	}
	var n uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil || n != 10 {
		t.Fatalf("the table after the hostile queries: %d rows, %v", n, err)
	}
	var stolen uint64
	if err := s.Conn().QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ? AND name = 'stolen'", s.Database()).Scan(&stolen); err != nil || stolen != 0 {
		t.Fatalf("stolen table: %d, %v", stolen, err)
	}
	if c := len(svc.Contacts(dist)); c != 0 {
		t.Fatalf("%d contacts pushed by refused queries", c)
	}
	if err := run("SELECT id, email FROM " + table + " SETTINGS max_threads = 1"); err != nil {
		t.Fatal(err)
	}
	if c := len(svc.Contacts(dist)); c != 10 {
		t.Fatalf("%d contacts pushed by the SELECT, want 10", c)
	}
}
