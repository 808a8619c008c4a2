package sim

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/survey"
)

// Webhooks: the service POSTs a flat JSON body to one URL; 200 and 204 are
// success; any other answer (or a network error, or no answer within
// WebhookTimeout) is retried after each delay of the schedule, then given
// up. One scheduler goroutine owned by the Sim keeps a queue ordered by due
// time and hands attempts to at most maxSenders sender goroutines; Close
// stops them all. GUIDs in webhooks are always upper case, as the
// service's.

const maxSenders = 16

// webhookBody is the flat payload of every event; absent fields are omitted.
type webhookBody struct {
	EventName        string `json:"event_name"`
	SurveyID         int64  `json:"survey_id"`
	ResponseID       string `json:"response_id,omitempty"`
	DistributionID   *int64 `json:"distribution_id,omitempty"`
	DistributionType string `json:"distribution_type,omitempty"`
	ContactID        *int64 `json:"contact_id,omitempty"`
	Completed        *bool  `json:"completed,omitempty"`
	Disqualified     *bool  `json:"disqualified,omitempty"`
	QuotaFull        *bool  `json:"quota_full,omitempty"`
	CompletedAt      string `json:"completed_at,omitempty"`
	LaunchedAt       string `json:"launched_at,omitempty"`
	EndedAt          string `json:"ended_at,omitempty"`
}

// WebhookDelivery is one delivery attempt, recorded for tests.
type WebhookDelivery struct {
	Event      int64           `json:"event"` // sequence number of the event (1, 2, …)
	EventName  string          `json:"event_name"`
	Body       json.RawMessage `json:"body"`
	Attempt    int             `json:"attempt"` // 1..len(schedule)
	At         time.Time       `json:"at"`      // real time of the attempt
	StatusCode int             `json:"status_code,omitempty"`
	Err        string          `json:"error,omitempty"`
	Delivered  bool            `json:"delivered"`
	GaveUp     bool            `json:"gave_up"` // the last attempt failed
}

type whJob struct {
	event   int64
	name    string
	body    []byte
	attempt int // attempts done so far
	due     time.Time
}

type jobHeap []*whJob

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].event < h[j].event
	}
	return h[i].due.Before(h[j].due)
}
func (h jobHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)   { *h = append(*h, x.(*whJob)) }
func (h *jobHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type webhooks struct {
	s         *Sim
	url       string
	sched     []time.Duration
	transport *http.Transport
	client    *http.Client
	key       []byte // Options.WebhookSecret decoded; nil: deliveries are not signed

	wake chan struct{}

	mu         sync.Mutex
	queue      jobHeap
	seq        int64
	deliveries []WebhookDelivery
	busy       int
}

func newWebhooks(s *Sim) *webhooks {
	tr := &http.Transport{MaxIdleConnsPerHost: maxSenders, IdleConnTimeout: 30 * time.Second}
	return &webhooks{
		s:         s,
		url:       s.opts.WebhookURL,
		sched:     s.opts.WebhookSchedule,
		transport: tr,
		client:    &http.Client{Transport: tr, Timeout: s.opts.WebhookTimeout},
		wake:      make(chan struct{}, 1),
	}
}

func fmtTime(t time.Time) string { return survey.FormatTime(t) }

// enqueue schedules a new event's first attempt.
func (w *webhooks) enqueue(name string, body webhookBody) {
	if w.url == "" || w.s.closed.Load() {
		return
	}
	b, err := json.Marshal(body)
	if err != nil {
		w.s.log.Error("sim: encode webhook", "event", name, "err", err)
		return
	}
	w.mu.Lock()
	w.seq++
	heap.Push(&w.queue, &whJob{event: w.seq, name: name, body: b, due: time.Now().Add(w.sched[0])})
	w.mu.Unlock()
	w.poke()
}

func (w *webhooks) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// responseReceived sends response_received for a response that reached a
// final status. As in the service's sample, completed is true for every
// finished response (also disqualified and quota-full ones).
func (w *webhooks) responseReceived(r *survey.Response) {
	id, _ := parseGUID16(string(r.ResponseID))
	b := webhookBody{
		EventName:      survey.EventResponseReceived,
		SurveyID:       r.SurveyID,
		ResponseID:     string(appendGUID(nil, id, true)),
		DistributionID: r.DistributionID,
		Completed:      survey.Bool(true),
		Disqualified:   survey.Bool(r.ResponseStatus == survey.StatusDisqualified),
		QuotaFull:      survey.Bool(r.ResponseStatus == survey.StatusQuotaFull),
	}
	if r.DistributionID != nil {
		if k := distKind(*r.DistributionID); k != 0 && *r.DistributionID/10 == r.SurveyID {
			b.DistributionType = distNames[k]
		} else {
			b.DistributionType = "link"
		}
	}
	if b.DistributionType == "email" || b.DistributionType == "cati" {
		b.ContactID = r.ContactID
	}
	if r.DateCompleted != nil {
		b.CompletedAt = fmtTime(r.DateCompleted.Time)
	}
	w.enqueue(survey.EventResponseReceived, b)
}

// run is the scheduler loop; it returns when ctx is done, after its senders.
func (w *webhooks) run(ctx context.Context) {
	var senders errgroup.Group
	senders.SetLimit(maxSenders)
	defer func() { _ = senders.Wait() }() // the senders record their outcome in the delivery log; none returns an error
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	send := func(j *whJob) func() error {
		return func() error {
			w.attempt(ctx, j)
			w.mu.Lock()
			w.busy--
			w.mu.Unlock()
			w.poke()
			return nil
		}
	}
	for {
		w.mu.Lock()
		now := time.Now()
		for len(w.queue) > 0 && !w.queue[0].due.After(now) && senders.TryGo(send(w.queue[0])) {
			heap.Pop(&w.queue)
			w.busy++
		}
		wait := time.Hour
		if len(w.queue) > 0 && w.busy < maxSenders {
			wait = max(time.Until(w.queue[0].due), 0)
		}
		w.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// attempt makes one delivery attempt of j and schedules the next on failure.
func (w *webhooks) attempt(ctx context.Context, j *whJob) {
	j.attempt++
	d := WebhookDelivery{Event: j.event, EventName: j.name, Body: j.body, Attempt: j.attempt, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(j.body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "Click4Survey-Webhooks/1.0 (surveysync emulator)")
		if w.key != nil {
			signWebhook(req.Header, w.key, j.body, time.Now())
		}
		var resp *http.Response
		resp, err = w.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drained for keep-alive; the status is what counts
			resp.Body.Close()
			d.StatusCode = resp.StatusCode
			d.Delivered = resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent
			if !d.Delivered {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
	}
	if err != nil {
		d.Err = scrubURL(err.Error(), w.url)
	}
	if ctx.Err() != nil && !d.Delivered {
		return // stopped: not an attempt the receiver could judge
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !d.Delivered {
		if j.attempt < len(w.sched) {
			j.due = time.Now().Add(w.sched[j.attempt])
			heap.Push(&w.queue, j)
		} else {
			d.GaveUp = true
		}
	}
	w.deliveries = append(w.deliveries, d)
	w.s.log.Debug("sim: webhook attempt", "event", j.name, "seq", j.event, "attempt", j.attempt, "delivered", d.Delivered, "gave_up", d.GaveUp, "err", d.Err)
}

// scrubURL keeps the webhook URL (which may hold a secret path) out of
// recorded errors.
func scrubURL(msg, url string) string {
	return strings.ReplaceAll(msg, url, "<webhook-url>")
}

func (w *webhooks) close() { w.transport.CloseIdleConnections() }

// WebhookDeliveries returns every delivery attempt so far, in the order
// they finished.
func (s *Sim) WebhookDeliveries() []WebhookDelivery {
	s.wh.mu.Lock()
	defer s.wh.mu.Unlock()
	return append([]WebhookDelivery(nil), s.wh.deliveries...)
}

// WebhooksPending returns the number of events waiting for a (re)try.
func (s *Sim) WebhooksPending() int {
	s.wh.mu.Lock()
	defer s.wh.mu.Unlock()
	return len(s.wh.queue) + s.wh.busy
}

// live sends response_received for generated responses completing on the
// clock.
func (s *Sim) live(ctx context.Context) {
	t := time.NewTicker(s.opts.LiveTick)
	defer t.Stop()
	last := s.nowNS()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.nowNS()
		if now <= last {
			continue
		}
		var out []survey.Response
		s.mu.Lock()
		for _, sv := range s.surveys {
			sv.ensureBuilt()
			for st := stCompleted; st <= stQuotaFull; st++ {
				a := sv.lists[st]
				lo, hi := sv.searchTime(a, last, true), sv.searchTime(a, now, true)
				for _, id := range a[lo:hi] {
					if int(id) >= sv.gen.n {
						continue // stored responses announce themselves
					}
					h := sv.gen.header(int(id))
					if !sv.exists(&h, now) {
						continue
					}
					r := survey.Response{ResponseID: survey.GUID(sv.gen.baseGUID(int(id)).String()), SurveyID: sv.gen.id,
						DistributionID: ptr(sv.gen.distributionID(h.dist)), ResponseStatus: statusNames[h.final],
						DateCompleted: &survey.Time{Time: time.Unix(0, h.completed).UTC()}}
					if h.contactID != 0 {
						r.ContactID = ptr(h.contactID)
					}
					out = append(out, r)
				}
			}
		}
		s.mu.Unlock()
		last = now
		for k := range out {
			s.wh.responseReceived(&out[k])
		}
	}
}

// webhookKey decodes Options.WebhookSecret: "whsec_<base64>" or a raw key;
// nil for none.
func webhookKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, nil
	}
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		k, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(k) == 0 {
			return nil, errors.New("sim: WebhookSecret: 'whsec_' prefix but the rest is not base64 (value hidden)")
		}
		return k, nil
	}
	return []byte(secret), nil
}

// signWebhook sets the Standard Webhooks headers of a delivery of body at
// t: the id is the body's hash (the same on every attempt, so the receiver
// de-duplicates retries), the signature the HMAC-SHA256 of
// "id.timestamp.body".
func signWebhook(h http.Header, key, body []byte, t time.Time) {
	sum := sha256.Sum256(body)
	id := hex.EncodeToString(sum[:])
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}
