package feed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/feedtest"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
)

// slowLedger is a ledger like ClickHouse: a write takes a while and fails
// when its context ends first. Outcome records (not intents) take delay.
type slowLedger struct {
	*parquet.FileLedger
	delay time.Duration
}

func (l slowLedger) RecordContacts(ctx context.Context, entries []feed.ContactEntry) error {
	if len(entries) > 0 && entries[0].State != feed.StateIntent {
		t := time.NewTimer(l.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.FileLedger.RecordContacts(ctx, entries)
}

// A client that disconnects mid-push must not leave the contacts the
// service created uncertain: their outcomes are known and recorded on a
// context detached from the request, even after the grace period ends
// while the ledger write is in flight (issue 12 part 6: 68 created contacts
// were left uncertain).
func TestHTTPClientDisconnectRecordsKnownOutcomes(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.SetDelay(20 * time.Millisecond)
	ledgerDir := t.TempDir()
	fl, err := parquet.NewFileLedger(ledgerDir)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	o := feed.Options{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Channel: feed.ChannelEmail,
		Mapping: map[string]string{"email": "email", "user_field1": "id"}, DedupeKey: "id", ChunkRows: 50,
		HTTP: feed.HTTPOptions{Path: "/feeds/web", Token: "s3cret"}}
	r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
		Ledger: slowLedger{fl, 400 * time.Millisecond}, ShutdownGrace: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler())
	var rows []string
	for i := range 68 {
		rows = append(rows, fmt.Sprintf(`{"id": "%d", "email": "c%d@example.cz"}`, i, i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/feeds/web", strings.NewReader("["+strings.Join(rows, ",")+"]"))
	req.Header.Set("Authorization", "Bearer s3cret")
	done := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(svc.Contacts(dist)) < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel() // the client goes away mid-push
	if err := <-done; err == nil {
		t.Fatal("the request finished before the disconnect; the test proves nothing")
	}
	srv.Close() // waits for the handler
	created := len(svc.Contacts(dist))
	if created == 0 {
		t.Fatal("nothing created")
	}

	// What a restart finds: every created contact pushed, none uncertain.
	r2, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second), Ledger: fl,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	unc, err := r2.Uncertain(context.Background(), "web")
	if err != nil {
		t.Fatal(err)
	}
	pushed := 0
	err = fl.LoadContacts(context.Background(), "web", func(e feed.ContactEntry) error {
		if e.State == feed.StatePushed {
			pushed++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(unc) != 0 || pushed != created {
		t.Fatalf("after a client disconnect: %d created, %d recorded pushed, %d uncertain", created, pushed, len(unc))
	}
	t.Logf("%d of 68 contacts created before the disconnect, all recorded pushed", created)
}
