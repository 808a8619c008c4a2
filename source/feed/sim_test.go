package feed_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/feed"
)

// startSim serves the emulator on 127.0.0.1.
func startSim(t testing.TB, faults ...sim.Fault) (*sim.Sim, string) {
	t.Helper()
	s, err := sim.New(sim.Options{Token: "test-token", Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faults {
		if err := s.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv.URL
}

func simIDs(s *sim.Sim) map[string]int {
	got := map[string]int{}
	for _, c := range s.Contacts(dist) {
		got[c.Contact.UserField1]++
	}
	return got
}

// TestEmulator10kStorms pushes a 10,000-row CSV with malformed rows and
// repeats to the emulator while it answers a quarter of the create-contact
// calls with 429 and a sixth with 503, and the sends with 502 half of the
// time: every good row exactly once, one send, nothing on a re-drop.
func TestEmulator10kStorms(t *testing.T) {
	s, url := startSim(t,
		sim.Fault{Op: sim.OpCreateContact, Kind: "429", Probability: 0.25},
		sim.Fault{Op: sim.OpCreateContact, Kind: "503", Probability: 0.16},
		sim.Fault{Op: sim.OpSendMessage, Kind: "502", Probability: 0.5},
	)
	dir := t.TempDir()
	o := csvFeed(dir)
	o.Concurrency = 16
	o.Send.Schedule = feed.Schedule{Policy: feed.PolicyWindow, Window: feed.Window{
		Days: []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday},
		From: "09:00", To: "17:00", TimeZone: "Europe/Prague"}}
	e := newEnv(t, url, t.TempDir(), 5*time.Second, o)
	good, bad := genCSV(t, filepath.Join(dir, "kontakty.csv"), 10000, true)
	ctx := context.Background()
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, simIDs(s), good)
	r := report(t, dir, "done")[0]
	if r.Summary.Pushed != int64(len(good)) || r.Summary.Invalid != int64(len(bad)) || r.Summary.Failed+r.Summary.Uncertain != 0 {
		t.Fatalf("summary %+v", r.Summary)
	}
	sends := s.Sends()
	if len(sends) != 1 || sends[0].MessageID != 9 {
		t.Fatalf("sends %+v", sends)
	}
	if r.Summary.Send == nil || r.Summary.Send.State != feed.SendSent {
		t.Fatalf("send %+v", r.Summary.Send)
	}
	// The window policy: a send outside Mon–Fri 09–17 Prague is scheduled.
	loc, _ := time.LoadLocation("Europe/Prague")
	now := time.Now().In(loc)
	inside := now.Weekday() >= time.Monday && now.Weekday() <= time.Friday && now.Hour() >= 9 && now.Hour() < 17
	if inside != (sends[0].ScheduledDate == nil) {
		t.Fatalf("now %s: scheduled %v", now, sends[0].ScheduledDate)
	}
	genCSV(t, filepath.Join(dir, "kontakty.csv"), 10000, true)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, simIDs(s), good)
	if n := len(s.Sends()); n != 1 {
		t.Fatalf("sends after re-drop: %d", n)
	}
	calls := s.Calls()
	t.Logf("emulator calls: %v", calls)
}
