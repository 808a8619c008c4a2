// Package sim is an in-process emulator of the whole Click4Survey v1 API
// (docs/api.md), backed by memory. Tests,
// benchmarks and the demo (cmd/surveysim) run surveysync against it.
//
// Responses are generated lazily and deterministically from (survey seed,
// index): a million of them cost a few megabytes (sorted index arrays for
// the lists), not a million structs. Only overrides are stored: responses
// added, changed, completed, deleted or purged through the control API.
//
// Time: Options.Now is the clock of the data. Generated response i is
// created at Start + i×Interval (+ jitter) and completes some minutes (or,
// for a "late" fraction, hours to two days) later; until then it is a
// partial response. A response exists (detail) once date_created <= Now and
// is listed once the date its stream is ordered by (date_completed, or
// date_created for partial) is <= Now. So advancing the clock makes
// responses arrive, and pages shift under a client exactly as they do on
// the real service.
//
// Everything the emulator does on purpose differently from, or beyond, the
// spec is listed in docs/emulator.md.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Options configure a Sim.
type Options struct {
	// Token is the accepted X-API-TOKEN. Requests without it or with another
	// get 401 with the service's error body. Empty accepts any token but
	// still requires the header.
	Token string
	// Surveys are generated at start.
	Surveys []SurveySpec
	// Now is the clock of the data (default time.Now).
	Now func() time.Time
	// Seed drives the emulator's own randomness: request ids, the ids of
	// responses added without one, probabilistic faults.
	Seed int64
	// WebhookURL receives webhooks ("" = none are sent).
	WebhookURL string
	// WebhookSchedule is the delay before each delivery attempt, measured
	// from the previous failed attempt (the first from the event); default
	// the service's 0, 3s, 30s, 5m, 1h, 24h: six attempts, then given up.
	// Tests pass a scaled one. It runs on the real clock, not Now.
	WebhookSchedule []time.Duration
	// WebhookSecret, when set, signs every delivery with the Standard
	// Webhooks headers (webhook-id: the hex SHA-256 of the body, the same on
	// every attempt; webhook-timestamp: the attempt's time;
	// webhook-signature: "v1,<base64 HMAC-SHA256>"), as a signing relay in
	// front of the service would: the service itself signs nothing.
	// "whsec_<base64>" is decoded, any other value is the raw key.
	WebhookSecret string
	// WebhookTimeout bounds one delivery attempt (default 10s).
	WebhookTimeout time.Duration
	// WebhookLive sends response_received for generated responses as they
	// complete on the clock (checked every LiveTick, default 1s). Off by
	// default: then only control-API actions send webhooks.
	WebhookLive bool
	LiveTick    time.Duration
	// RejectUnknownDistributions makes create contact and send answer 404
	// for distribution ids that belong to no survey (default: accept any
	// positive id and record it).
	RejectUnknownDistributions bool
	Logger                     *slog.Logger
}

// StatusMix weighs the final statuses of generated responses. A zero mix
// means 80 % completed, 8 % disqualified, 4 % quota-full, 8 % partial.
type StatusMix struct {
	Completed, Disqualified, QuotaFull, Partial float64
}

// SurveySpec describes one generated survey.
type SurveySpec struct {
	ID   int64
	Name string // Czech text; default "Spokojenost zákazníků <id>"
	// Responses is the number of generated responses, spread from Start at
	// Interval (default 1 minute). A zero Start means Now − Responses×Interval,
	// so all are in the past at start but the newest few still in progress.
	Responses int
	Seed      int64
	Start     time.Time
	Interval  time.Duration
	Statuses  StatusMix
	// LateCompletion is the fraction of non-partial responses that stay
	// partial for 2 to 48 hours before completing (0 = 0.05; < 0 = none).
	LateCompletion float64
	// Files adds an upload question (type file_upload, 0–2 files per
	// response) of FileSize bytes per file (default 64 KiB).
	Files    bool
	FileSize int
}

// Sim is the emulator. Its methods are safe for concurrent use.
type Sim struct {
	opts   Options
	now    func() time.Time
	log    *slog.Logger
	key    uint64
	reqSeq atomic.Uint64
	skew   atomic.Int64 // AdvanceClock's total, added to Options.Now

	mu      sync.RWMutex
	surveys map[int64]*survState
	idSeq   uint64 // ids of added responses

	faults faultSet
	calls  callCounters

	cmu       sync.Mutex
	contacts  map[int64][]*contactRec // by distribution
	contactID int64
	sends     []ReceivedSend

	wh *webhooks

	ctlOnce sync.Once
	ctl     http.Handler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// survState is one survey: its generator and its overrides.
type survState struct {
	gen        *surveyGen
	launchedAt time.Time
	endedAt    int64 // unix ns; 0 = running

	built   bool
	lists   [4][]int32 // ids per stream, sorted by (list time, guid); id < n: generated, else extras[id-n]
	delayed []int32    // generated indices of late completions, ascending

	extras   []*entry
	byGUID   map[guid16]int32 // extras slot by id (added and overridden responses)
	baseOver map[int32]int32  // generated index → extras slot
}

// entry is a stored (added or overridden) response.
type entry struct {
	resp   survey.Response
	id     guid16
	base   int32 // generated index it overrides, or -1
	purged bool
	list   uint8 // stream it is listed in, or stNone
	t      int64 // its list time
}

// surveyGen holds what generation of one survey needs.
type surveyGen struct {
	id       int64
	name     string
	key      uint64
	key2     uint64
	key3     uint64
	n        int
	start    int64
	interval int64
	cum      [3]float64
	late     float64
	files    bool
	fileSize int64
	q        *questionnaire
}

// DefaultWebhookSchedule is the service's webhook schedule (docs/api.md
// section 11), Options.WebhookSchedule's default.
func DefaultWebhookSchedule() []time.Duration {
	return []time.Duration{0, 3 * time.Second, 30 * time.Second, 5 * time.Minute, time.Hour, 24 * time.Hour}
}

// Defaults of zero Options fields.
const (
	DefaultWebhookTimeout = 10 * time.Second
	DefaultLiveTick       = time.Second
)

func (o *Options) setDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.WebhookSchedule) == 0 {
		o.WebhookSchedule = DefaultWebhookSchedule()
	}
	if o.WebhookTimeout <= 0 {
		o.WebhookTimeout = DefaultWebhookTimeout
	}
	if o.LiveTick <= 0 {
		o.LiveTick = DefaultLiveTick
	}
}

// New creates an emulator. Close it to stop its webhook senders.
func New(o Options) (*Sim, error) {
	o.setDefaults()
	s := &Sim{
		opts:     o,
		log:      o.Logger,
		key:      mix64(uint64(o.Seed) ^ 0x5eed5eed),
		surveys:  map[int64]*survState{},
		contacts: map[int64][]*contactRec{},
	}
	s.now = func() time.Time { return o.Now().Add(time.Duration(s.skew.Load())) }
	s.contactID = 554784
	s.faults.rng = newRNG(uint64(o.Seed), 0xfa17)
	now := o.Now()
	for _, sp := range o.Surveys {
		if _, dup := s.surveys[sp.ID]; dup {
			return nil, fmt.Errorf("sim: survey %d configured twice", sp.ID)
		}
		g, err := newSurveyGen(sp, now)
		if err != nil {
			return nil, err
		}
		s.surveys[sp.ID] = &survState{gen: g, launchedAt: time.Unix(0, g.start).UTC()}
	}
	key, err := webhookKey(o.WebhookSecret)
	if err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wh = newWebhooks(s)
	s.wh.key = key
	if o.WebhookURL != "" {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.wh.run(s.ctx) }()
		if o.WebhookLive {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.live(s.ctx) }()
		}
	}
	return s, nil
}

func newSurveyGen(sp SurveySpec, now time.Time) (*surveyGen, error) {
	if sp.ID <= 0 {
		return nil, fmt.Errorf("sim: survey id %d: want > 0", sp.ID)
	}
	if sp.Responses < 0 || sp.Responses > 1<<30 {
		return nil, fmt.Errorf("sim: survey %d: responses %d out of range", sp.ID, sp.Responses)
	}
	if sp.Name == "" {
		sp.Name = fmt.Sprintf("Spokojenost zákazníků %d", sp.ID)
	}
	if sp.Interval <= 0 {
		sp.Interval = time.Minute
	}
	if sp.Start.IsZero() {
		sp.Start = now.Add(-time.Duration(sp.Responses) * sp.Interval)
	}
	m := sp.Statuses
	if m == (StatusMix{}) {
		m = StatusMix{Completed: 0.80, Disqualified: 0.08, QuotaFull: 0.04, Partial: 0.08}
	}
	if m.Completed < 0 || m.Disqualified < 0 || m.QuotaFull < 0 || m.Partial < 0 {
		return nil, fmt.Errorf("sim: survey %d: negative status weight", sp.ID)
	}
	total := m.Completed + m.Disqualified + m.QuotaFull + m.Partial
	late := sp.LateCompletion
	switch {
	case late == 0:
		late = 0.05
	case late < 0:
		late = 0
	}
	if sp.FileSize <= 0 {
		sp.FileSize = 64 << 10
	}
	key := mix64(uint64(sp.Seed)*0x9e3779b97f4a7c15 ^ uint64(sp.ID))
	g := &surveyGen{
		id:       sp.ID,
		name:     sp.Name,
		key:      key,
		key2:     mix64(key ^ 0x9e3779b97f4a7c15),
		key3:     mix64(key ^ 0x6a09e667f3bcc909),
		n:        sp.Responses,
		start:    sp.Start.UnixNano(),
		interval: int64(sp.Interval),
		cum:      [3]float64{m.Completed / total, (m.Completed + m.Disqualified) / total, (m.Completed + m.Disqualified + m.QuotaFull) / total},
		late:     late,
		files:    sp.Files,
		fileSize: int64(sp.FileSize),
	}
	g.q = newQuestionnaire(key, sp.Files)
	return g, nil
}

// Close stops the webhook senders and waits for them. Pending deliveries are
// abandoned. The handler keeps answering.
func (s *Sim) Close() {
	if s.closed.Swap(true) {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.wh.close()
}

// Now returns the data clock: Options.Now plus every AdvanceClock.
func (s *Sim) Now() time.Time { return s.now() }

// AdvanceClock moves the data clock forward by d (for the stand-alone
// server, whose clock is the real one): responses due in that time arrive.
// A negative d moves it back.
func (s *Sim) AdvanceClock(d time.Duration) { s.skew.Add(int64(d)) }

// nowNS is the data clock in unix nanoseconds.
func (s *Sim) nowNS() int64 { return s.now().UnixNano() }

// Errors of the control API.
var (
	ErrUnknownSurvey = errors.New("sim: unknown survey")
	ErrNotFound      = errors.New("sim: response not found")
	ErrExists        = errors.New("sim: response already exists")
	ErrState         = errors.New("sim: response is not in a state that allows this")
)

func (s *Sim) survey(id int64) (*survState, bool) {
	sv, ok := s.surveys[id]
	return sv, ok
}

// exists reports whether generated response i exists at now.
func (sv *survState) exists(h *header, now int64) bool {
	if h.created > now {
		return false
	}
	return sv.endedAt == 0 || h.created <= sv.endedAt
}
