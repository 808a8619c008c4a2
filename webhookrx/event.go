package webhookrx

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/survey"
)

// Event is one webhook delivery as the spool keeps it.
type Event struct {
	// ID identifies the event for de-duplication: the webhook-id header
	// when the service sent one, else the hex SHA-256 of the body.
	ID string
	// Seq is the event's position in the spool: strictly increasing in the
	// order events were accepted, across restarts.
	Seq uint64
	// ReceivedAt is when the receiver accepted the request.
	ReceivedAt time.Time
	// Body is the request body exactly as received.
	Body []byte
	// Parsed is the body decoded; GUIDs are lower case. The completed,
	// disqualified and quota_full flags are as sent and must not be trusted.
	Parsed survey.WebhookEvent
	// Name is the event_name as sent.
	Name string
}

// work is an event handed to the workers.
type work struct {
	ev       Event
	size     int64 // of its spool record: what it costs in memory while handed out
	attempts int   // Process calls that failed before this one
}

// Event kinds, as returned by Kind and used in metric labels.
const (
	KindSurveyLaunched   = survey.EventSurveyLaunched
	KindResponseReceived = survey.EventResponseReceived
	KindSurveyEnded      = survey.EventSurveyEnded // any of the three spellings
	KindUnknown          = "unknown"
)

// Kind is the event's kind: survey_launched, response_received,
// survey_ended (for survey_ended, survey_finished and survey_closed) or
// unknown.
func (e Event) Kind() string { return kindOf(e.Name) }

func kindOf(name string) string {
	switch {
	case name == survey.EventSurveyLaunched:
		return KindSurveyLaunched
	case name == survey.EventResponseReceived:
		return KindResponseReceived
	case survey.IsSurveyEnded(name):
		return KindSurveyEnded
	}
	return KindUnknown
}

// Processor does the work for one event. It returns nil only when the
// event's effects are durable (response_received: the response fetched and
// written through the pipeline; survey events: the surveys table updated and
// the polling set changed). Any other error is retried with backoff (behind
// a gate of the event's survey, without holding a worker) and the event
// stays in the spool. An error permanent.Is reports (wrap it with
// permanent.New; a permanent.Error from the pipeline, the sinks or the
// client is one already) gives up on an event that can never succeed: it
// is logged with outcome "rejected" and removed. Process is never called
// for unknown event names. It must not modify ev.Body (the spool shares it) and may be called concurrently
// (Options.ProcessConcurrency); an event may be processed more than once
// (after a crash), so Process must be idempotent.
type Processor interface {
	Process(ctx context.Context, ev Event) error
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc func(ctx context.Context, ev Event) error

// Process calls f.
func (f ProcessorFunc) Process(ctx context.Context, ev Event) error { return f(ctx, ev) }

// Outcomes of a processed event in LogEntry.Outcome and in
// surveysync_webhook_events_total.
const (
	OutcomeProcessed = "processed" // Process returned nil
	OutcomeIgnored   = "ignored"   // unknown event name: kept and logged, nothing else
	OutcomeRejected  = "rejected"  // Process returned a Permanent error
)

// LogEntry is one row of the raw webhook log (table webhook_events): the
// neutral entry type of record, so a warehouse's WebhookLog is an
// EventLog.
type LogEntry = record.WebhookEvent

// EventLog keeps the raw log of processed events. LogEvents returns nil only
// once the entries are durable; it is retried otherwise, and the events
// stay in the spool until it succeeds. A Permanent error gives up on the
// batch: its events are marked done without a log row. An entry may be logged more than once
// after a crash: the log must tolerate it (ReplacingMergeTree by event_id).
type EventLog interface {
	LogEvents(ctx context.Context, entries []LogEntry) error
}

// EventLogFunc adapts a function to EventLog.
type EventLogFunc func(ctx context.Context, entries []LogEntry) error

// LogEvents calls f.
func (f EventLogFunc) LogEvents(ctx context.Context, entries []LogEntry) error {
	return f(ctx, entries)
}

func logEntry(ev Event, outcome string, perr error, attempts int, at time.Time) LogEntry {
	e := LogEntry{
		EventID:     ev.ID,
		EventName:   ev.Name,
		SurveyID:    ev.Parsed.SurveyID,
		ResponseID:  string(ev.Parsed.ResponseID),
		ReceivedAt:  ev.ReceivedAt,
		ProcessedAt: at,
		Outcome:     outcome,
		Attempts:    attempts,
		Body:        string(ev.Body),
	}
	if perr != nil {
		e.Error = perr.Error()
	}
	return e
}

// bodyID is the event id of a body delivered without a webhook-id.
func bodyID(body []byte) string {
	h := sha256.Sum256(body)
	return hex.EncodeToString(h[:])
}

// validID reports whether a webhook-id can serve as an event id: 1 to 255
// printable ASCII characters without spaces (ids are logged, and were
// lines of the former spool's done.log).
func validID(id string) bool {
	if id == "" || len(id) > 255 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// parseEvent checks and decodes a webhook body. It is strict only where an
// event could not be processed: the body must be a JSON object with an
// event_name; survey_launched, survey-ended and response_received need a
// survey_id; response_received needs a GUID response_id. Other fields are
// decoded leniently (numbers as text, flags as text) and dropped when
// malformed: the raw body is kept anyway.
func parseEvent(body []byte) (survey.WebhookEvent, error) {
	var ev survey.WebhookEvent
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return ev, fmt.Errorf("body must be a JSON object, got %s", ute.Value)
		}
		return ev, fmt.Errorf("invalid JSON: %w", err)
	}
	if raw == nil {
		return ev, errors.New("body must be a JSON object, got null")
	}
	if _, err := dec.Token(); err != io.EOF {
		return ev, errors.New("invalid JSON: data after the object")
	}
	nameRaw, ok := raw["event_name"]
	if !ok {
		return ev, errors.New("missing event_name")
	}
	if err := json.Unmarshal(nameRaw, &ev.EventName); err != nil || strings.TrimSpace(ev.EventName) == "" {
		return ev, fmt.Errorf("event_name must be a non-empty string, got %s", nameRaw)
	}
	kind := kindOf(ev.EventName)

	sid, err := flexInt(raw["survey_id"])
	switch {
	case err != nil && kind != KindUnknown:
		return ev, fmt.Errorf("%s: survey_id: %w", ev.EventName, err)
	case err == nil && sid != nil:
		ev.SurveyID = *sid
	case sid == nil && kind != KindUnknown:
		return ev, fmt.Errorf("%s: missing survey_id", ev.EventName)
	}
	if r, ok := raw["response_id"]; ok && !isNull(r) {
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			if kind == KindResponseReceived {
				return ev, fmt.Errorf("response_received: response_id must be a GUID string, got %s", r)
			}
		} else if g, err := survey.ParseGUID(s); err == nil {
			ev.ResponseID = g
		} else if kind == KindResponseReceived {
			return ev, fmt.Errorf("response_received: response_id: %w", err)
		}
	}
	if kind == KindResponseReceived && ev.ResponseID == "" {
		return ev, errors.New("response_received: missing response_id")
	}
	ev.DistributionID, _ = flexInt(raw["distribution_id"])
	ev.ContactID, _ = flexInt(raw["contact_id"])
	if r, ok := raw["distribution_type"]; ok {
		_ = json.Unmarshal(r, &ev.DistributionType)
	}
	ev.Completed = flexBool(raw["completed"])
	ev.Disqualified = flexBool(raw["disqualified"])
	ev.QuotaFull = flexBool(raw["quota_full"])
	ev.CompletedAt = flexTime(raw["completed_at"])
	ev.LaunchedAt = flexTime(raw["launched_at"])
	// The survey-ended payload is undocumented: take the first time field
	// that fits.
	for _, k := range []string{"ended_at", "finished_at", "closed_at", "ended", "date"} {
		if t := flexTime(raw[k]); t != nil {
			ev.EndedAt = t
			break
		}
	}
	return ev, nil
}

func isNull(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }

// flexInt decodes a number or numeric string; nil for absent or null.
func flexInt(r json.RawMessage) (*int64, error) {
	if isNull(r) {
		return nil, nil
	}
	var n survey.FlexInt
	if err := n.UnmarshalJSON(r); err != nil {
		return nil, fmt.Errorf("want an integer, got %s", r)
	}
	v := int64(n)
	return &v, nil
}

func flexBool(r json.RawMessage) *bool {
	if isNull(r) {
		return nil
	}
	s := strings.Trim(string(r), `"`)
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil
	}
	return &b
}

func flexTime(r json.RawMessage) *survey.Time {
	if isNull(r) {
		return nil
	}
	var t survey.Time
	if err := t.UnmarshalJSON(r); err != nil || t.IsZero() {
		return nil
	}
	return &t
}
