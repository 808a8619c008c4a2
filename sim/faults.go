package sim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Operations, as faults and Calls name them.
const (
	OpListResponses = "list_responses"
	OpGetResponse   = "get_response"
	OpCreateContact = "create_contact"
	OpSendMessage   = "send_message"
	OpDownloadFile  = "download_file"
	OpAll           = "*"
	opOther         = "other" // unknown paths (404/405), for Calls
)

var ops = []string{OpListResponses, OpGetResponse, OpCreateContact, OpSendMessage, OpDownloadFile, opOther}

// Fault kinds besides HTTP status codes ("400"…"599", e.g. "429", "500",
// "502", "503", "402", "401", each answered with the service's error body).
const (
	FaultRetryAfter      = "429_retry_after" // 429 with a Retry-After header (RetryAfter, default 1s, in whole seconds)
	FaultSlow            = "slow"            // answer normally after Delay
	FaultReset           = "reset"           // drop the connection (downloads: mid-body)
	FaultVariantSpelling = "variant_spelling"
	FaultUppercaseGUID   = "uppercase_guid"
	FaultNoTitle         = "no_title"
	FaultShift           = "shift" // list_responses: insert a fresh response before the current page
	// FaultQuotaFullAsDisqualified: get_response details a quota-full
	// response as "disqualified", as the real service does (its list
	// filter still says quotafull).
	FaultQuotaFullAsDisqualified = "quotafull_as_disqualified"
	// get_response: a broken detail. future_date sends date_completed (else
	// date_created) as 2200-01-01T00:00:00Z, a valid timestamp no DateTime
	// column holds; invalid_date sends it as "not a date".
	FaultFutureDate  = "future_date"
	FaultInvalidDate = "invalid_date"
	// Hostile list answers (list_responses; issue 19): a list the poller
	// must not believe, and must not pay for without end.
	// implausible_total claims a total of 10^9 with the pages as they are;
	// repeat_page answers every page of a list with its first page,
	// whatever the dates and page asked (the status filter holds), filled
	// to per_page by repeating its ids, claiming a total of 10^9;
	// unstable_total claims a different total at every call (the true one
	// plus the number of such answers so far); endless_pages never ends a list: page p is full, starts
	// with the p-th id of the list (cycling), repeats the first one, and
	// claims a total of one page more.
	FaultImplausibleTotal = "implausible_total"
	FaultRepeatPage       = "repeat_page"
	FaultUnstableTotal    = "unstable_total"
	FaultEndlessPages     = "endless_pages"
)

// hostileTotal is what implausible_total and repeat_page claim.
const hostileTotal = 1_000_000_000

// Fault is an injected misbehaviour of one operation (Op, or "*" for all),
// of every survey or only of Survey (> 0), of every response or only of
// Response (a response id, any case: the calls whose path names it, i.e.
// get_response and download_file).
// With Count > 0 it fires on the next Count matching calls; with Probability
// in (0, 1] it fires on that fraction of them (drawn from a generator seeded
// by Options.Seed; with both, at most Count times); with neither, on every
// call until ClearFaults. Status faults are exclusive (the first that fires
// answers); the others combine.
type Fault struct {
	Op          string        `json:"op"`
	Kind        string        `json:"kind"`
	Survey      int64         `json:"survey,omitempty"`
	Response    string        `json:"response,omitempty"`
	Probability float64       `json:"probability,omitempty"`
	Count       int           `json:"count,omitempty"`
	Delay       time.Duration `json:"delay,omitempty"`
	RetryAfter  time.Duration `json:"retry_after,omitempty"`
}

// UnmarshalJSON accepts durations as Go duration strings ("1.5s") or
// nanoseconds.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var raw struct {
		Op          string          `json:"op"`
		Kind        string          `json:"kind"`
		Survey      int64           `json:"survey"`
		Response    string          `json:"response"`
		Probability float64         `json:"probability"`
		Count       int             `json:"count"`
		Delay       json.RawMessage `json:"delay"`
		RetryAfter  json.RawMessage `json:"retry_after"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	d, err := parseDurationJSON(raw.Delay)
	if err != nil {
		return fmt.Errorf("fault delay: %w", err)
	}
	ra, err := parseDurationJSON(raw.RetryAfter)
	if err != nil {
		return fmt.Errorf("fault retry_after: %w", err)
	}
	*f = Fault{Op: raw.Op, Kind: raw.Kind, Survey: raw.Survey, Response: raw.Response, Probability: raw.Probability, Count: raw.Count, Delay: d, RetryAfter: ra}
	return nil
}

// MarshalJSON renders durations as strings.
func (f Fault) MarshalJSON() ([]byte, error) {
	type out struct {
		Op          string  `json:"op"`
		Kind        string  `json:"kind"`
		Survey      int64   `json:"survey,omitempty"`
		Response    string  `json:"response,omitempty"`
		Probability float64 `json:"probability,omitempty"`
		Count       int     `json:"count,omitempty"`
		Delay       string  `json:"delay,omitempty"`
		RetryAfter  string  `json:"retry_after,omitempty"`
	}
	o := out{Op: f.Op, Kind: f.Kind, Survey: f.Survey, Response: f.Response, Probability: f.Probability, Count: f.Count}
	if f.Delay != 0 {
		o.Delay = f.Delay.String()
	}
	if f.RetryAfter != 0 {
		o.RetryAfter = f.RetryAfter.String()
	}
	return json.Marshal(o)
}

func parseDurationJSON(b json.RawMessage) (time.Duration, error) {
	if len(b) == 0 || string(b) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		return time.ParseDuration(s)
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return 0, fmt.Errorf("want a duration string or nanoseconds, got %s", b)
	}
	return time.Duration(n), nil
}

func (f Fault) validate() error {
	switch f.Op {
	case OpListResponses, OpGetResponse, OpCreateContact, OpSendMessage, OpDownloadFile, OpAll:
	default:
		return fmt.Errorf("sim: fault op %q: want list_responses, get_response, create_contact, send_message, download_file or *", f.Op)
	}
	if f.statusCode() == 0 {
		switch f.Kind {
		case FaultSlow, FaultReset, FaultVariantSpelling, FaultUppercaseGUID, FaultNoTitle, FaultShift, FaultQuotaFullAsDisqualified,
			FaultFutureDate, FaultInvalidDate, FaultImplausibleTotal, FaultRepeatPage, FaultUnstableTotal, FaultEndlessPages:
		default:
			return fmt.Errorf("sim: fault kind %q unknown", f.Kind)
		}
	}
	if f.Probability < 0 || f.Probability > 1 || f.Count < 0 || f.Survey < 0 {
		return fmt.Errorf("sim: fault %s/%s: probability must be in [0,1] and count >= 0", f.Op, f.Kind)
	}
	return nil
}

// statusCode returns the HTTP status a fault answers with, or 0.
func (f Fault) statusCode() int {
	if f.Kind == FaultRetryAfter {
		return 429
	}
	n, err := strconv.Atoi(f.Kind)
	if err != nil || n < 400 || n > 599 {
		return 0
	}
	return n
}

// FaultStatus is an injected fault with how often it fired.
type FaultStatus struct {
	Fault
	Fired int64 `json:"fired"`
}

// MarshalJSON renders the fault with its fired count.
func (f FaultStatus) MarshalJSON() ([]byte, error) {
	b, err := f.Fault.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(b[:len(b)-1], `,"fired":`...)
	b = strconv.AppendInt(b, f.Fired, 10)
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *FaultStatus) UnmarshalJSON(b []byte) error {
	var n struct {
		Fired int64 `json:"fired"`
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	f.Fired = n.Fired
	return f.Fault.UnmarshalJSON(b)
}

type faultState struct {
	f     Fault
	left  int
	fired int64
}

type faultSet struct {
	active   atomic.Int32
	unstable atomic.Int64 // answers of unstable_total so far: what each adds
	mu       sync.Mutex
	list     []*faultState
	rng      rng
}

// effects is what the faults decided for one call.
type effects struct {
	status        int
	retryAfter    time.Duration
	hasRetryAfter bool
	delay         time.Duration
	reset         bool
	variant       bool
	upper         bool
	noTitle       bool
	shift         bool
	qfAsDisq      bool
	badDate       int // dateFuture or dateInvalid
	list          int // listImplausible | listRepeat | listUnstable | listEndless
}

// Hostile list answers (effects.list bits).
const (
	listImplausible = 1 << iota
	listRepeat
	listUnstable
	listEndless
)

// decide draws the faults of one call of op on survey sid (0: none named)
// and response rid ("": none named).
func (fs *faultSet) decide(op string, sid int64, rid string) effects {
	var e effects
	if fs.active.Load() == 0 {
		return e
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, st := range fs.list {
		f := &st.f
		if f.Op != op && f.Op != OpAll || f.Survey != 0 && f.Survey != sid {
			continue
		}
		if f.Response != "" && !strings.EqualFold(f.Response, rid) {
			continue
		}
		if f.Count > 0 && st.left == 0 {
			continue
		}
		code := f.statusCode()
		if code != 0 && e.status != 0 {
			continue
		}
		switch f.Kind {
		case FaultShift, FaultImplausibleTotal, FaultRepeatPage, FaultUnstableTotal, FaultEndlessPages:
			if op != OpListResponses {
				continue
			}
		}
		if (f.Kind == FaultFutureDate || f.Kind == FaultInvalidDate) && op != OpGetResponse {
			continue
		}
		if f.Probability > 0 && fs.rng.float() >= f.Probability {
			continue
		}
		if f.Count > 0 {
			st.left--
		}
		st.fired++
		switch f.Kind {
		case FaultRetryAfter:
			e.status, e.hasRetryAfter, e.retryAfter = 429, true, f.RetryAfter
			if e.retryAfter <= 0 {
				e.retryAfter = time.Second
			}
		case FaultSlow:
			e.delay += f.Delay
		case FaultReset:
			e.reset = true
		case FaultVariantSpelling:
			e.variant = true
		case FaultUppercaseGUID:
			e.upper = true
		case FaultNoTitle:
			e.noTitle = true
		case FaultShift:
			e.shift = true
		case FaultQuotaFullAsDisqualified:
			e.qfAsDisq = true
		case FaultFutureDate:
			e.badDate = dateFuture
		case FaultInvalidDate:
			e.badDate = dateInvalid
		case FaultImplausibleTotal:
			e.list |= listImplausible
		case FaultRepeatPage:
			e.list |= listRepeat
		case FaultUnstableTotal:
			e.list |= listUnstable
		case FaultEndlessPages:
			e.list |= listEndless
		default:
			e.status = code
		}
	}
	return e
}

// InjectFault adds a fault. It returns an error for an unknown op or kind.
func (s *Sim) InjectFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.list = append(s.faults.list, &faultState{f: f, left: f.Count})
	s.faults.active.Store(int32(len(s.faults.list)))
	return nil
}

// ClearFaults removes every fault.
func (s *Sim) ClearFaults() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.list = nil
	s.faults.active.Store(0)
}

// Faults lists the injected faults and how often each fired.
func (s *Sim) Faults() []FaultStatus {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	out := make([]FaultStatus, len(s.faults.list))
	for k, st := range s.faults.list {
		out[k] = FaultStatus{Fault: st.f, Fired: st.fired}
	}
	return out
}

// callCounters counts calls per operation.
type callCounters struct {
	n [6]atomic.Int64
}

func (c *callCounters) add(op string) {
	for k, o := range ops {
		if o == op {
			c.n[k].Add(1)
			return
		}
	}
}

// Calls returns the number of API calls received per operation (every call,
// including rejected and faulted ones; "other" counts unknown paths).
func (s *Sim) Calls() map[string]int64 {
	out := make(map[string]int64, len(ops))
	for k, o := range ops {
		out[o] = s.calls.n[k].Load()
	}
	return out
}
