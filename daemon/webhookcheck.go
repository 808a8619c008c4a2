package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/webhookrx"
)

// The cost of a response_received webhook whose response does not exist
// (issue 32: 5,000 of them, random ids of a known survey, cost 5,000 detail
// calls, as many inventory look-ups and list calls, and starved the real
// webhooks queued behind them). A webhook cannot be told from a real one
// without asking the service, so the cost is bounded per survey instead of
// per event:
//
//   - an id already known to be absent (a bounded, expiring set) is never
//     fetched without the check below;
//   - at most directMax events of a survey are fetched at once without a
//     check (a burst of real webhooks waits for a slot, as it would for
//     the API's own concurrency);
//   - a survey whose webhooks named absent responses lately (missThreshold
//     within missWindow) is "flooded": its webhooks are checked against a
//     listing before any detail call. One list call per status named by
//     the waiting events (paged, at most listMaxPages) answers every event
//     received before it started; a survey has one listing in flight at a
//     time, at most one per listMinInterval. A listed response is fetched
//     and written as usual; an unlisted one is not fetched.
//
// Nothing is lost: an absent response's survey joins the polling set (as a
// 404 on the detail did before), so a response that appears later — the
// service lists it after the webhook, or it did not exist yet — is written
// by the poller, whose windows cover it (late completions included:
// docs/architecture.md, "Freshness and cost"). The only price of a wrong
// "absent" is freshness (the poll's interval instead of seconds), paid only
// while a survey's webhooks keep naming responses that do not exist.
const (
	missWindow      = time.Minute
	missThreshold   = 3
	directMax       = 4
	listMinInterval = 250 * time.Millisecond
	listPerPage     = 1000
	listMaxPages    = 10
	// listLookback bounds how far back a listing reaches: a webhook's
	// completed_at older than that (the service's late retries, or a forged
	// date) is listed from its arrival minus listLookback.
	listLookback = time.Hour
	// listSlack widens a listing's start below the completion it looks for
	// (the service's clock against ours, rounding).
	listSlack = 2 * time.Minute
	// listReach is how far back every listing reaches at least, so that
	// one made for some events also answers the others arriving meanwhile
	// (a real webhook among junk ones dated now) without another listing.
	listReach = 10 * time.Minute
	// absentTTL and absentMax bound the set of ids known to be absent.
	absentTTL = 15 * time.Minute
	absentMax = 100_000
	// readableTTL is how long a survey's readability (one list call) is
	// trusted; surveysMax bounds the surveys tracked.
	readableTTL = 10 * time.Minute
	// endCheckInterval and endCheckBurst bound the calls confirming a
	// survey's survey_ended events.
	endCheckInterval = 10 * time.Second
	endCheckBurst    = 3
	// unknownRate and unknownBurst bound the events of unknown surveys
	// (never synced, not read lately) checked with the API, over all
	// surveys: random survey ids cannot be batched per survey.
	unknownRate  = 1 // a second
	unknownBurst = 3
	surveysMax   = 10_000
)

// responseKey names a response of a survey.
type responseKey struct {
	survey int64
	id     survey.GUID
}

// absentSet remembers the responses that webhooks named and the service did
// not have, for absentTTL, at most absentMax of them (the oldest entry goes
// first).
type absentSet struct {
	mu   sync.Mutex
	at   map[responseKey]time.Time
	ring []responseKey // insertion order, at most absentMax
	next int           // the oldest slot once ring is full
}

func newAbsentSet() *absentSet {
	return &absentSet{at: map[responseKey]time.Time{}}
}

func (a *absentSet) add(k responseKey, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.at[k]; !ok {
		if len(a.ring) < absentMax { // grows as ids come, up to absentMax
			a.ring = append(a.ring, k)
		} else {
			delete(a.at, a.ring[a.next])
			a.ring[a.next] = k
			a.next = (a.next + 1) % absentMax
		}
	}
	a.at[k] = now
}

func (a *absentSet) has(k responseKey, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[k]
	return ok && now.Sub(t) < absentTTL
}

func (a *absentSet) forget(k responseKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.at, k) // its ring slot is reused in turn
}

// listNeed is what one event needs of a listing: made after the event
// arrived, from at most from, of these statuses.
type listNeed struct {
	received time.Time
	from     time.Time
	statuses []string
}

// needOf is an event's need. The flags choose the statuses (they are only a
// hint: a response whose flags lie is not listed where it is, is taken for
// absent, and is written by the poller); completed_at, within listLookback
// of the arrival, the start.
func needOf(ev webhookrx.Event) listNeed {
	e := ev.Parsed
	n := listNeed{received: ev.ReceivedAt, from: ev.ReceivedAt.Add(-listLookback)}
	if e.CompletedAt != nil && e.CompletedAt.After(n.from) {
		n.from = e.CompletedAt.Time
		if n.from.After(ev.ReceivedAt) {
			n.from = ev.ReceivedAt
		}
	}
	n.from = n.from.Add(-listSlack)
	yes := func(b *bool) bool { return b != nil && *b }
	if yes(e.Completed) {
		n.statuses = append(n.statuses, survey.StatusCompleted)
	}
	if yes(e.Disqualified) {
		n.statuses = append(n.statuses, survey.StatusDisqualified)
	}
	if yes(e.QuotaFull) {
		n.statuses = append(n.statuses, survey.StatusQuotaFull)
	}
	if len(n.statuses) == 0 {
		n.statuses = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull}
	}
	return n
}

// listing is the answer of one round of list calls for a survey.
type listing struct {
	at       time.Time // when its calls started: it answers events received before
	from     time.Time // its start_completed_at
	statuses []string
	ids      map[survey.GUID]struct{}
	complete bool // every page read (false: listMaxPages reached)
	calls    int
}

func (l *listing) covers(n listNeed) bool {
	if l == nil || l.at.Before(n.received) || l.from.After(n.from) {
		return false
	}
	for _, s := range n.statuses {
		if !slices.Contains(l.statuses, s) {
			return false
		}
	}
	return true
}

// round is a listing being gathered: events join it until it starts.
type round struct {
	from     time.Time
	statuses []string
	done     chan struct{}
	res      *listing
	err      error
}

func (r *round) widen(n listNeed) {
	if n.from.Before(r.from) {
		r.from = n.from
	}
	for _, s := range n.statuses {
		if !slices.Contains(r.statuses, s) {
			r.statuses = append(r.statuses, s)
		}
	}
}

// surveyCheck is what the processor knows of one survey's webhooks.
type surveyCheck struct {
	misses     []time.Time   // the last missThreshold absent responses
	direct     int           // detail calls in flight for unchecked events
	changed    chan struct{} // closed when direct drops or a miss is recorded (nil: nobody waits)
	last       *listing      // the newest listing
	next       *round        // the round events join (nil: none gathering)
	inflight   chan struct{} // closed when the round making its calls ends
	lastStart  time.Time     // when the newest round started
	readableAt time.Time     // the last list call that answered
	deniedAt   time.Time     // the last call that found the survey unreadable (403/404)
	denied     error         // its error
	endLimit   *rate.Limiter // calls confirming a survey_ended
	liveAfter  time.Time     // the latest claimed end found contradicted (responses started after it)
}

// webhookChecks holds the per-survey state. Its zero value is not usable;
// use newWebhookChecks.
type webhookChecks struct {
	mu         sync.Mutex
	surveys    map[int64]*surveyCheck
	unknown    *rate.Limiter  // checks of unknown surveys
	configured map[int64]bool // the surveys of the configuration (surveys:)
	absent     *absentSet
	api        surveyLister
	now        func() time.Time
	// sleep waits d or until ctx is done (a test may replace it).
	sleep func(ctx context.Context, d time.Duration) error
}

func newWebhookChecks(api surveyLister, now func() time.Time) *webhookChecks {
	return &webhookChecks{surveys: map[int64]*surveyCheck{}, absent: newAbsentSet(), api: api, now: now, sleep: sleepCtx,
		unknown: rate.NewLimiter(unknownRate, unknownBurst)}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// survey returns id's state; the caller holds c.mu.
func (c *webhookChecks) survey(id int64) *surveyCheck {
	s := c.surveys[id]
	if s == nil {
		if len(c.surveys) >= surveysMax {
			for k, v := range c.surveys { // drop the idle ones
				if v.direct == 0 && v.next == nil && v.changed == nil {
					delete(c.surveys, k)
				}
			}
		}
		s = &surveyCheck{}
		c.surveys[id] = s
	}
	return s
}

// flooded reports whether s named missThreshold absent responses within
// missWindow; the caller holds c.mu.
func (s *surveyCheck) flooded(now time.Time) bool {
	return len(s.misses) >= missThreshold && now.Sub(s.misses[0]) < missWindow
}

// startDirect waits for one of the survey's directMax slots for a detail
// call without a listing, and takes it (endDirect gives it back); it
// reports false, without waiting further, once the survey is flooded (its
// events are then checked against a listing).
func (c *webhookChecks) startDirect(ctx context.Context, surveyID int64) (bool, error) {
	for {
		c.mu.Lock()
		s := c.survey(surveyID)
		if s.flooded(c.now()) {
			c.mu.Unlock()
			return false, nil
		}
		if s.direct < directMax {
			s.direct++
			c.mu.Unlock()
			return true, nil
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// wake tells the events waiting for a slot of s to look again; the
// caller holds c.mu.
func (s *surveyCheck) wake() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

func (c *webhookChecks) endDirect(surveyID int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.surveys[surveyID]; s != nil && s.direct > 0 {
		s.direct--
		s.wake()
	}
}

// miss records a response the service did not have.
func (c *webhookChecks) miss(k responseKey) {
	now := c.now()
	c.absent.add(k, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.survey(k.survey)
	s.misses = append(s.misses, now)
	if len(s.misses) > missThreshold {
		s.misses = s.misses[len(s.misses)-missThreshold:]
	}
	s.wake()
}

// readable reports whether a list call of the survey answered within
// readableTTL.
func (c *webhookChecks) readable(surveyID int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.surveys[surveyID]
	return s != nil && !s.readableAt.IsZero() && c.now().Sub(s.readableAt) < readableTTL
}

func (c *webhookChecks) markReadable(surveyID int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.survey(surveyID)
	s.readableAt, s.deniedAt = c.now(), time.Time{}
}

// setConfigured replaces the configured surveys (at start and at a
// reload): they are never unknown.
func (c *webhookChecks) setConfigured(ids []int64) {
	m := make(map[int64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	c.mu.Lock()
	c.configured = m
	c.mu.Unlock()
}

// markDenied records that the token cannot read the survey (403, or 404 on
// a list call).
func (c *webhookChecks) markDenied(surveyID int64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.survey(surveyID)
	s.deniedAt, s.denied = c.now(), err
}

// admit decides whether an event of surveyID may cost API calls: not for
// a survey found unreadable within readableTTL; for one that is neither
// configured, nor known (in the surveys table: synced or launched before),
// nor read lately, only within unknownRate over all surveys (random survey
// ids cannot share a listing). The error says why not.
func (c *webhookChecks) admit(surveyID int64, known bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	s := c.surveys[surveyID]
	if s != nil && !s.deniedAt.IsZero() && now.Sub(s.deniedAt) < readableTTL {
		return fmt.Errorf("survey %d, which the API token could not read %v ago (%w): not asked again for %v; the event is not acted on",
			surveyID, now.Sub(s.deniedAt).Round(time.Second), s.denied, readableTTL)
	}
	if known || c.configured[surveyID] || s != nil && !s.readableAt.IsZero() && now.Sub(s.readableAt) < readableTTL {
		return nil
	}
	if !c.unknown.AllowN(now, 1) {
		return fmt.Errorf("survey %d is unknown (never synced, not read lately) and events of unknown surveys come faster than %d a second: not checked with the API, not acted on; the survey is found at its next event",
			surveyID, unknownRate)
	}
	return nil
}

// listed checks one event against a listing of its survey made after it
// arrived, joining (or leading) the next round of list calls when none
// covers it. It reports whether the response is listed, and the listing.
func (c *webhookChecks) listed(ctx context.Context, surveyID int64, id survey.GUID, n listNeed) (bool, *listing, error) {
	for {
		c.mu.Lock()
		s := c.survey(surveyID)
		if s.last.covers(n) {
			l := s.last
			c.mu.Unlock()
			_, ok := l.ids[id]
			return ok, l, nil
		}
		r, lead := s.next, false
		if r == nil {
			r = &round{from: n.from, statuses: slices.Clone(n.statuses), done: make(chan struct{})}
			s.next, lead = r, true
		} else {
			r.widen(n)
		}
		c.mu.Unlock()
		if lead {
			c.run(ctx, surveyID, s, r)
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
		if r.err != nil {
			return false, nil, r.err
		}
		// The listing answers n unless n joined after the round started
		// (then the next one does): look again.
	}
}

// run waits for the survey's round in flight, if any, and out
// listMinInterval since it started (events join meanwhile), then makes the round's list calls and publishes the listing.
func (c *webhookChecks) run(ctx context.Context, surveyID int64, s *surveyCheck, r *round) {
	defer close(r.done)
	c.mu.Lock()
	prev := s.inflight
	c.mu.Unlock()
	err := ctx.Err()
	if prev != nil { // one listing in flight per survey
		select {
		case <-prev:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil {
		c.mu.Lock()
		wait := listMinInterval - c.now().Sub(s.lastStart)
		c.mu.Unlock()
		err = c.sleep(ctx, wait)
	}
	if err != nil {
		c.mu.Lock()
		s.next = nil
		c.mu.Unlock()
		r.err = err
		return
	}
	c.mu.Lock()
	s.next = nil // later events gather the next round
	s.inflight = r.done
	start := c.now()
	s.lastStart = start
	if reach := start.Add(-listReach); reach.Before(r.from) {
		r.from = reach
	}
	l := &listing{at: start, from: r.from, statuses: slices.Clone(r.statuses), ids: map[survey.GUID]struct{}{}, complete: true}
	c.mu.Unlock()
	for _, st := range l.statuses {
		for page := 1; ; page++ {
			if page > listMaxPages {
				l.complete = false
				break
			}
			lst, err := c.api.ListResponses(ctx, surveyID, survey.ListQuery{Page: page, PerPage: listPerPage, StartCompletedAt: l.from, Status: st})
			l.calls++
			if err != nil {
				r.err = fmt.Errorf("survey %d: listing its %s responses to check webhooks: %w", surveyID, st, err)
				return
			}
			for _, d := range lst.Data {
				l.ids[d.ResponseID] = struct{}{}
			}
			if len(lst.Data) < listPerPage || page*listPerPage >= lst.Total {
				break
			}
		}
	}
	c.mu.Lock()
	if s.last == nil || !s.last.at.After(l.at) {
		s.last = l
	}
	s.readableAt, s.deniedAt = c.now(), time.Time{}
	c.mu.Unlock()
	r.res = l
}

// startEndCheck admits one call confirming a survey_ended that claims the
// survey ended at: an error says why none is made (the end is known false,
// or the survey had endCheckBurst calls lately: one more per
// endCheckInterval). endEndCheck must follow an admitted call.
func (c *webhookChecks) startEndCheck(surveyID int64, at time.Time) (*rate.Reservation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.survey(surveyID)
	if !s.liveAfter.IsZero() && !at.After(s.liveAfter) {
		return nil, fmt.Errorf("survey %d: survey_ended says it ended at %s, but the service listed responses started after %s: the survey is live; not acted on (a forged or mistaken event), the survey keeps its cadence",
			surveyID, at.UTC().Format(time.RFC3339), s.liveAfter.UTC().Format(time.RFC3339))
	}
	if s.endLimit == nil {
		s.endLimit = rate.NewLimiter(rate.Every(endCheckInterval), endCheckBurst)
	}
	now := c.now()
	r := s.endLimit.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, fmt.Errorf("survey %d: survey_ended not confirmed: %d of this survey were checked lately (one more per %v): not acted on, the survey keeps its cadence",
			surveyID, endCheckBurst, endCheckInterval)
	}
	return r, nil
}

// endEndCheck records a confirming call's answer: live, the claimed end is
// false (and any earlier one); a call that failed transiently does not
// count (the event is retried).
func (c *webhookChecks) endEndCheck(surveyID int64, at time.Time, res *rate.Reservation, err error, live bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.survey(surveyID)
	switch {
	case err != nil && !errors.Is(err, surveyapi.ErrForbidden) && !errors.Is(err, survey.ErrNotFound):
		res.CancelAt(c.now())
	case err != nil:
		s.deniedAt, s.denied = c.now(), err
	case err == nil:
		s.readableAt, s.deniedAt = c.now(), time.Time{}
		if live && at.After(s.liveAfter) {
			s.liveAfter = at
		}
	}
}
