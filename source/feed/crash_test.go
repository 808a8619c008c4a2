package feed_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/chtest"
	"github.com/surveysync/surveysync/internal/testkit/feedtest"
	chsink "github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// crashChild is the process the crash test kills: it runs the csv feed on
// FEED_DIR with the file ledger in FEED_LEDGER against FEED_API.
func crashChild() {
	c, err := surveyapi.New(surveyapi.Options{BaseURL: os.Getenv("FEED_API") + "/v1", Token: "test-token",
		UserAgent: "surveysync-test (test@example.cz)", RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxRetries: 60})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var l feed.Ledger
	if db := os.Getenv("FEED_CH_DB"); db != "" {
		o, _ := chtest.Options(db)
		s, err := chsink.Open(context.Background(), o)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		l = chsink.NewFeedLedger(s)
	} else {
		fl, err := parquet.NewFileLedger(os.Getenv("FEED_LEDGER"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		l = fl
	}
	o := csvFeed(os.Getenv("FEED_DIR"))
	o.ChunkRows = 50
	r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: c, Ledger: l,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := r.RunOnce(context.Background(), "crm"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestCrashMidFile kills a process (SIGKILL) in the middle of a file and
// restarts on the same folder and ledger: no row is created twice, every
// good row ends pushed or uncertain, and the uncertain ones are at most two
// chunks (the intents recorded before the kill).
func TestCrashMidFile(t *testing.T) { crashTest(t, nil) }

// TestCrashMidFileClickHouse is TestCrashMidFile with the ClickHouse ledger.
func TestCrashMidFileClickHouse(t *testing.T) { crashTest(t, openCH(t)) }

func crashTest(t *testing.T, ch *chsink.Sink) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.SetDelay(2 * time.Millisecond)
	dir, ledgerDir := t.TempDir(), t.TempDir()
	good, _ := genCSV(t, filepath.Join(dir, "big.csv"), 3000, true)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FEED_CRASH_CHILD=1", "FEED_DIR="+dir, "FEED_LEDGER="+ledgerDir, "FEED_API="+svc.URL())
	if ch != nil {
		cmd.Env = append(cmd.Env, "FEED_CH_DB="+ch.Database())
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(svc.Contacts(dist)) < 725 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	before := len(svc.Contacts(dist))
	if before >= len(good) {
		t.Fatalf("the child finished (%d contacts) before it was killed", before)
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "processing", "*big.csv")); len(n) != 1 {
		t.Fatalf("the file should be left in processing/: %v", n)
	}
	t.Logf("killed after %d contacts", before)

	// Restart on the same folder and ledger.
	svc.SetDelay(0)
	e := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, csvFeed(dir))
	var ledger feed.Ledger = e.ledger
	if ch != nil {
		ledger = chsink.NewFeedLedger(ch)
		r, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{csvFeed(dir)}, API: e.api, Ledger: ledger})
		if err != nil {
			t.Fatal(err)
		}
		e.runner = r
	}
	ctx := context.Background()
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	got := pushedIDs(t, svc)
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s created %d times", id, n)
		}
	}
	unc, err := e.runner.Uncertain(ctx, "crm")
	if err != nil {
		t.Fatal(err)
	}
	if len(unc) > 2*50 {
		t.Fatalf("%d uncertain rows, at most two chunks (2×50) expected", len(unc))
	}
	uncertain := map[string]bool{}
	for _, u := range unc {
		uncertain[u.Key] = true
		if u.State != feed.StateUncertain || u.Line == 0 || u.File == "" {
			t.Errorf("uncertain entry %+v", u)
		}
	}
	// Every good row is accounted for: pushed (once) or uncertain.
	last := map[string]string{}
	if err := ledger.LoadContacts(ctx, "crm", func(c feed.ContactEntry) error { last[c.Key] = c.State; return nil }); err != nil {
		t.Fatal(err)
	}
	for id := range good {
		switch {
		case last[id] == feed.StatePushed && got[id] == 1:
		case last[id] == feed.StateUncertain && uncertain[id] && got[id] <= 1:
		default:
			t.Errorf("%s: ledger %q, created %d times", id, last[id], got[id])
		}
	}
	r := report(t, dir, "done")
	if len(r) != 1 || r[0].Summary.Rows != 3000 {
		t.Fatalf("report after resume: %+v", r)
	}
	reported := map[string]bool{}
	for _, p := range r[0].Problems {
		if p.Outcome == feed.OutcomeUncertain {
			reported[p.Key] = true
			if !uncertain[p.Key] {
				t.Errorf("report: %s uncertain, the ledger says %q", p.Key, last[p.Key])
			}
		}
	}
	if len(reported) != len(unc) {
		t.Errorf("report names %d uncertain keys, ledger %d", len(reported), len(unc))
	}
	// The batch pushed contacts (before and after the kill): one send.
	if n := len(svc.Sends()); n != 1 {
		t.Fatalf("sends: %d", n)
	}
	t.Logf("after restart: %d created, %d uncertain (of which %d were in fact created)", len(got), len(unc), countCreated(unc, got))
}

func countCreated(unc []feed.ContactEntry, got map[string]int) int {
	n := 0
	for _, u := range unc {
		n += got[u.Key]
	}
	return n
}
