package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// listStub lists the ids in listed (every status) and counts its calls;
// each call waits for gate when it is set.
type listStub struct {
	mu     sync.Mutex
	listed map[survey.GUID]bool
	calls  atomic.Int64
	gate   chan struct{}
	froms  []time.Time
}

func (s *listStub) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	s.calls.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.froms = append(s.froms, q.StartCompletedAt)
	l := &survey.ResponseList{Page: q.Page, PerPage: q.PerPage}
	for id := range s.listed {
		l.Data = append(l.Data, survey.ResponseRef{ResponseID: id})
	}
	l.Total = len(l.Data)
	return l, nil
}

func guid(i int) survey.GUID {
	return survey.GUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
}

func completedEvent(surveyID int64, id survey.GUID, received, completed time.Time) webhookrx.Event {
	yes := true
	return webhookrx.Event{ReceivedAt: received, Parsed: survey.WebhookEvent{EventName: survey.EventResponseReceived,
		SurveyID: surveyID, ResponseID: id, Completed: &yes, CompletedAt: &survey.Time{Time: completed}}}
}

// 500 events waiting together are answered by one listing (one list call:
// they all name the completed status); a later event needs a newer one;
// the listing reaches back to the earliest completed_at less the slack.
func TestOneListingAnswersEveryEventThatWaited(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	stub := &listStub{listed: map[survey.GUID]bool{guid(7): true}, gate: make(chan struct{})}
	c := newWebhookChecks(stub, func() time.Time { return *clock.Load() })
	c.sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	ctx := context.Background()

	var wg sync.WaitGroup
	var found atomic.Int64
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev := completedEvent(1, guid(i), now.Add(-time.Second), now.Add(-time.Duration(i)*time.Second))
			ok, _, err := c.listed(ctx, 1, guid(i), needOf(ev))
			if err != nil {
				t.Error(err)
			}
			if ok {
				found.Add(1)
			}
		}()
	}
	// Let them all join a round before the first call answers.
	for deadline := time.Now().Add(5 * time.Second); stub.calls.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(stub.gate)
	wg.Wait()
	if n := stub.calls.Load(); n > 3 {
		t.Fatalf("%d list calls for 500 events that waited together", n)
	}
	if found.Load() != 1 {
		t.Fatalf("%d events found listed, want 1 (guid 7)", found.Load())
	}
	calls := stub.calls.Load()
	// An event that arrived before the last listing costs nothing more.
	ok, _, err := c.listed(ctx, 1, guid(7), needOf(completedEvent(1, guid(7), now.Add(-time.Second), now.Add(-time.Second))))
	if err != nil || !ok || stub.calls.Load() != calls {
		t.Fatalf("an event covered by the last listing: ok %v err %v, %d calls (was %d)", ok, err, stub.calls.Load(), calls)
	}
	// One that arrived after it needs a new one.
	later := now.Add(time.Second)
	clock.Store(&later)
	stub.mu.Lock()
	stub.listed[guid(9000)] = true
	stub.mu.Unlock()
	ok, _, err = c.listed(ctx, 1, guid(9000), needOf(completedEvent(1, guid(9000), later, later)))
	if err != nil || !ok || stub.calls.Load() != calls+1 {
		t.Fatalf("a later event: ok %v err %v, %d calls (was %d)", ok, err, stub.calls.Load(), calls)
	}
	// A listing reached back to the oldest completed_at among the events
	// that joined it (at most listLookback), less the slack.
	first := slices.MinFunc(stub.froms, func(a, b time.Time) int { return a.Compare(b) })
	if want := now.Add(-499 * time.Second).Add(-listSlack); !first.Equal(want) {
		t.Fatalf("earliest listing from %v, want %v", first, want)
	}
}

// Three absent responses within a minute flood a survey: no more direct
// fetches until a minute passes without one; at most directMax direct
// fetches at once, the next waits for a slot.
func TestFloodedSurveyAndDirectSlots(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	c := newWebhookChecks(&listStub{}, func() time.Time { return now })
	ctx := context.Background()
	for range directMax {
		if ok, err := c.startDirect(ctx, 5); !ok || err != nil {
			t.Fatal("a slot refused below directMax")
		}
	}
	got := make(chan bool, 1)
	go func() { ok, _ := c.startDirect(ctx, 5); got <- ok }()
	select {
	case <-got:
		t.Fatal("a ninth direct fetch did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	c.endDirect(5)
	if !<-got {
		t.Fatal("the waiting fetch did not get the freed slot")
	}
	for i := range missThreshold {
		c.miss(responseKey{survey: 5, id: guid(i)})
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if ok, err := c.startDirect(short, 5); ok || err != nil {
		t.Fatalf("a flooded survey still fetches directly (ok %v, err %v)", ok, err)
	}
	if ok, _ := c.startDirect(short, 6); !ok {
		t.Fatal("another survey is flooded too")
	}
	if !c.absent.has(responseKey{survey: 5, id: guid(1)}, now) || c.absent.has(responseKey{survey: 5, id: guid(1)}, now.Add(absentTTL)) {
		t.Fatal("an absent id is not remembered for absentTTL")
	}
	now = now.Add(missWindow)
	for range directMax {
		c.endDirect(5)
	}
	if ok, _ := c.startDirect(short, 5); !ok {
		t.Fatal("a survey quiet for missWindow is still flooded")
	}
}

// The set of absent ids is bounded: the oldest entry goes first.
func TestAbsentSetIsBounded(t *testing.T) {
	now := time.Now()
	a := newAbsentSet()
	for i := range absentMax + 10 {
		a.add(responseKey{survey: 1, id: guid(i)}, now)
	}
	if len(a.at) != absentMax {
		t.Fatalf("%d entries, want %d", len(a.at), absentMax)
	}
	if a.has(responseKey{survey: 1, id: guid(0)}, now) || !a.has(responseKey{survey: 1, id: guid(absentMax + 9)}, now) {
		t.Fatal("not the oldest entries evicted")
	}
}

// survey_ended checks: an end no later than one found contradicted costs
// no call; endCheckBurst calls, then one per endCheckInterval; a call that
// failed transiently does not count.
func TestSurveyEndedChecksAreBounded(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	c := newWebhookChecks(&listStub{}, func() time.Time { return now })
	end := now.Add(-30 * time.Minute)
	r, err := c.startEndCheck(7, end)
	if err != nil {
		t.Fatal(err)
	}
	c.endEndCheck(7, end, r, nil, true) // live: responses started after end
	if _, err := c.startEndCheck(7, end.Add(-time.Hour)); err == nil || !strings.Contains(err.Error(), "the survey is live") {
		t.Fatalf("an earlier end than one found false: %v", err)
	}
	for i := range endCheckBurst - 1 {
		r, err := c.startEndCheck(7, now)
		if err != nil {
			t.Fatalf("check %d refused: %v", i+2, err)
		}
		c.endEndCheck(7, now, r, nil, false)
	}
	if _, err := c.startEndCheck(7, now); err == nil {
		t.Fatal("a check beyond the burst admitted")
	}
	now = now.Add(endCheckInterval)
	r, err = c.startEndCheck(7, now)
	if err != nil {
		t.Fatalf("no check after endCheckInterval: %v", err)
	}
	c.endEndCheck(7, now, r, errors.New("503 Service unavailable"), false)
	if _, err := c.startEndCheck(7, now); err != nil {
		t.Fatalf("a failed call counted: %v", err)
	}
	if _, err := c.startEndCheck(8, now); err != nil {
		t.Fatalf("another survey limited: %v", err)
	}
}

// Events of unknown surveys cost calls only within unknownRate over all
// surveys; a known survey is always admitted; a survey found unreadable is
// not asked again for readableTTL, and the refusal names the first error.
func TestUnknownSurveysAreAdmittedAtARate(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	c := newWebhookChecks(&listStub{}, func() time.Time { return now })
	admitted := 0
	for i := range 1000 {
		if c.admit(int64(100000+i), false) == nil {
			admitted++
		}
	}
	if admitted != unknownBurst {
		t.Fatalf("%d of 1,000 unknown surveys admitted at once, want %d", admitted, unknownBurst)
	}
	if err := c.admit(42, true); err != nil {
		t.Fatalf("a known survey refused: %v", err)
	}
	c.markReadable(43)
	if err := c.admit(43, false); err != nil {
		t.Fatalf("a survey read lately refused: %v", err)
	}
	now = now.Add(time.Second)
	if c.admit(200000, false) != nil {
		t.Fatal("no unknown survey admitted a second later")
	}
	c.markDenied(44, errors.New("get_response survey 44: 403 Nemáte oprávnění"))
	err := c.admit(44, true)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a survey found unreadable: %v", err)
	}
	now = now.Add(readableTTL)
	if err := c.admit(44, true); err != nil {
		t.Fatalf("a survey found unreadable %v ago still refused: %v", readableTTL, err)
	}
}

// What an event needs of a listing: the statuses its flags name (all
// three without one), from its completed_at (at most listLookback before
// it arrived, never after), less the slack.
func TestListNeedOfAnEvent(t *testing.T) {
	received := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	yes, no := true, false
	for _, c := range []struct {
		name     string
		ev       survey.WebhookEvent
		from     time.Time
		statuses []string
	}{
		{"no flags, no date", survey.WebhookEvent{}, received.Add(-listLookback - listSlack),
			[]string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull}},
		{"disqualified", survey.WebhookEvent{Completed: &no, Disqualified: &yes, CompletedAt: &survey.Time{Time: received.Add(-time.Minute)}},
			received.Add(-time.Minute - listSlack), []string{survey.StatusDisqualified}},
		{"quota full and completed", survey.WebhookEvent{Completed: &yes, QuotaFull: &yes},
			received.Add(-listLookback - listSlack), []string{survey.StatusCompleted, survey.StatusQuotaFull}},
		{"completed in the future", survey.WebhookEvent{Completed: &yes, CompletedAt: &survey.Time{Time: received.Add(time.Hour)}},
			received.Add(-listSlack), []string{survey.StatusCompleted}},
		{"completed days ago (a late retry, or forged)", survey.WebhookEvent{Completed: &yes, CompletedAt: &survey.Time{Time: received.Add(-72 * time.Hour)}},
			received.Add(-listLookback - listSlack), []string{survey.StatusCompleted}},
	} {
		n := needOf(webhookrx.Event{ReceivedAt: received, Parsed: c.ev})
		if !n.from.Equal(c.from) || !slices.Equal(n.statuses, c.statuses) || !n.received.Equal(received) {
			t.Errorf("%s: from %v statuses %v, want from %v statuses %v", c.name, n.from, n.statuses, c.from, c.statuses)
		}
	}
}

// The per-survey state is bounded: past surveysMax surveys the idle ones
// are dropped, a survey with a detail call in flight is kept.
func TestSurveyChecksAreBounded(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	c := newWebhookChecks(&listStub{}, func() time.Time { return now })
	if ok, err := c.startDirect(context.Background(), 1); !ok || err != nil {
		t.Fatal("no slot")
	}
	for i := range surveysMax {
		c.markReadable(int64(1000 + i))
	}
	c.mu.Lock()
	n := len(c.surveys)
	busy := c.surveys[1]
	c.mu.Unlock()
	// The last survey found surveysMax tracked: the idle ones went, the
	// busy one and itself remain.
	if n != 2 || busy == nil || busy.direct != 1 {
		t.Fatalf("%d surveys tracked, want 2 (max %d); the busy one: %+v", n, surveysMax, busy)
	}
	c.endDirect(1)
}
