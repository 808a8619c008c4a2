// Package feedtest has a small fake of the survey service's contact and
// send endpoints (docs/api.md §4.1, §4.2) for the feed tests: it records every
// contact and send it accepts and injects 429s, 5xx answers and lost
// answers on demand. The full emulator lives in sim; this fake keeps
// the feed tests exact about what reached the service.
package feedtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Fault is what the fake does with the n-th call (1-based) before handling it.
type Fault int

// Faults.
const (
	None        Fault = iota
	TooMany           // 429 with Retry-After: 0, nothing created
	Unavailable       // 503, nothing created
	Hang              // create the contact, then never answer (the client's timeout turns it into ErrUncertain)
)

// Send is a send call the fake received.
type Send struct {
	DistributionID int64
	MessageID      int64
	ScheduledDate  *time.Time
}

// SetDelay adds d to every accepted call from now on; safe while calls are
// in flight.
func (s *Service) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Service is the fake. Use Start, then URL()+"/v1" as the client's base URL.
type Service struct {
	srv   *httptest.Server
	calls atomic.Int64

	// FaultFor, when set, decides the fault of the n-th call to any endpoint.
	FaultFor func(n int64) Fault
	// Reject, when set, makes create-contact answer 400 with the returned
	// message when it is non-empty.
	Reject func(c survey.Contact) string
	// FaultForContact, when set, decides a fault from a create-contact
	// body (checked after FaultFor); only TooMany and Unavailable apply.
	FaultForContact func(c survey.Contact) Fault
	delay           atomic.Int64 // nanoseconds added to every accepted call; SetDelay

	mu       sync.Mutex
	contacts map[int64][]survey.Contact
	sends    []Send
	nextID   int64
	hang     chan struct{}
}

// Start starts a fake on 127.0.0.1.
func Start() *Service {
	s := &Service{contacts: map[int64][]survey.Contact{}, nextID: 554000, hang: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL of the fake, without /v1.
func (s *Service) URL() string { return s.srv.URL }

// Close releases hung calls and stops the server.
func (s *Service) Close() {
	s.mu.Lock()
	select {
	case <-s.hang:
	default:
		close(s.hang)
	}
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Contacts returns the contacts created in a distribution, in creation order.
func (s *Service) Contacts(distributionID int64) []survey.Contact {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]survey.Contact(nil), s.contacts[distributionID]...)
}

// Sends returns the send calls accepted.
func (s *Service) Sends() []Send {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Send(nil), s.sends...)
}

// Calls is the number of calls received, faults included.
func (s *Service) Calls() int64 { return s.calls.Load() }

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func errBody(status int, msg string) map[string]any {
	return map[string]any{"meta": map[string]any{"requestId": "req-" + strconv.Itoa(status), "http_status": status,
		"errors": []map[string]string{{"error_message": msg}}}}
}

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	n := s.calls.Add(1)
	if r.Header.Get("X-API-TOKEN") == "" {
		writeJSON(w, 401, errBody(401, "Invalid API token"))
		return
	}
	fault := None
	if s.FaultFor != nil {
		fault = s.FaultFor(n)
	}
	switch fault {
	case TooMany:
		w.Header().Set("Retry-After", "0")
		writeJSON(w, 429, errBody(429, "Too many requests"))
		return
	case Unavailable:
		writeJSON(w, 503, errBody(503, "Service unavailable"))
		return
	}
	if d := time.Duration(s.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// v1 distributions {id} contacts | v1 distributions {id} messages {mid} send
	if r.Method != http.MethodPost || len(parts) < 4 || parts[0] != "v1" || parts[1] != "distributions" {
		writeJSON(w, 404, errBody(404, "Not found"))
		return
	}
	dist, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		writeJSON(w, 404, errBody(404, "Not found"))
		return
	}
	switch {
	case len(parts) == 4 && parts[3] == "contacts":
		var c survey.Contact
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			writeJSON(w, 400, errBody(400, "Bad JSON: "+err.Error()))
			return
		}
		if s.FaultForContact != nil {
			switch s.FaultForContact(c) {
			case TooMany:
				w.Header().Set("Retry-After", "0")
				writeJSON(w, 429, errBody(429, "Too many requests"))
				return
			case Unavailable:
				writeJSON(w, 503, errBody(503, "Service unavailable"))
				return
			}
		}
		if s.Reject != nil {
			if msg := s.Reject(c); msg != "" {
				writeJSON(w, 400, errBody(400, msg))
				return
			}
		}
		s.mu.Lock()
		s.nextID++
		id := s.nextID
		s.contacts[dist] = append(s.contacts[dist], c)
		s.mu.Unlock()
		if fault == Hang {
			select {
			case <-r.Context().Done():
			case <-s.hang:
			}
			return
		}
		writeJSON(w, 201, map[string]any{
			"meta":   map[string]any{"requestId": fmt.Sprintf("req-%d", n), "http_status": 201},
			"result": map[string]any{"id": id, "survey_url": fmt.Sprintf("https://www.click4survey.cz/m4/%d/%d", dist, id), "created_at": survey.FormatTime(time.Now())},
		})
	case len(parts) == 6 && parts[3] == "messages" && parts[5] == "send":
		mid, err := strconv.ParseInt(parts[4], 10, 64)
		if err != nil {
			writeJSON(w, 404, errBody(404, "Not found"))
			return
		}
		var req survey.SendRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, 400, errBody(400, "Bad JSON"))
			return
		}
		s.mu.Lock()
		snd := Send{DistributionID: dist, MessageID: mid}
		if req.ScheduledDate != nil {
			t := req.ScheduledDate.Time
			snd.ScheduledDate = &t
		}
		s.sends = append(s.sends, snd)
		total := int64(len(s.contacts[dist]))
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{
			"meta":   map[string]any{"requestId": fmt.Sprintf("req-%d", n), "http_status": 200},
			"result": map[string]any{"contacts_count": map[string]int64{"pending": total, "sent": 0, "bounces": 0}},
		})
	default:
		writeJSON(w, 404, errBody(404, "Not found"))
	}
}
