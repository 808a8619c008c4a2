// Package survey holds the domain types of the survey service's v1 API
// (docs/api.md §2) as surveysync sees them: contacts, sends, response lists,
// responses with their pages, questions and answers, and webhook events.
//
// The types decode every variant the service is known to send
// (docs/api.md): GUIDs in either case (normalised to lower case), times
// with 0 to 7 fractional digits, numbers given as text, a missing title.
// The client (source/surveyapi), the emulator (sim), the flattener
// (pipeline/flatten) and the webhook receiver (webhookrx) all share them.
package survey

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Response statuses as a response record reports them (docs/api.md §3). The list
// filter also knows StatusQuotaFull; the emulator reports it in records too.
const (
	StatusPartial      = "partial"
	StatusCompleted    = "completed"
	StatusDisqualified = "disqualified"
	StatusQuotaFull    = "quotafull"
	StatusDeleted      = "deleted"
)

// GUID is a GUID in canonical 8-4-4-4-12 form, always lower case.
type GUID string

// ErrBadGUID is matched (errors.Is) by the error of ParseGUID, also when
// it comes from decoding JSON.
var ErrBadGUID = errors.New("invalid guid")

// ErrBadTime is matched (errors.Is) by the error of ParseTime, also when it
// comes from decoding JSON.
var ErrBadTime = errors.New("invalid timestamp")

// ParseGUID validates s as a canonical GUID and returns it in lower case.
// Its errors never quote s: a malformed id may be personal data, and the
// errors end up in reject records and log lines.
func ParseGUID(s string) (GUID, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%w (%d bytes): want 36 characters in 8-4-4-4-12 form", ErrBadGUID, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", fmt.Errorf("%w: want '-' at offset %d", ErrBadGUID, i)
			}
			continue
		}
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return "", fmt.Errorf("%w: the character at offset %d is not hexadecimal", ErrBadGUID, i)
		}
	}
	return GUID(strings.ToLower(s)), nil
}

// MustGUID is ParseGUID for constants in tests and generators; it panics on a bad value.
func MustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

func (g GUID) String() string { return string(g) }

// UnmarshalJSON accepts a GUID string in either case.
func (g *GUID) UnmarshalJSON(b []byte) error {
	s, ok := plainString(b)
	if !ok {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("guid: %w", err)
		}
	}
	v, err := ParseGUID(s)
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Time is a UTC instant that decodes every timestamp form the service sends:
// ISO 8601 with 0 to 9 fractional digits, `Z` or a numeric offset.
type Time struct{ time.Time }

// ParseTime parses a service timestamp.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// Some samples omit the zone; the service documents UTC.
		t2, err2 := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, time.UTC)
		if err2 != nil {
			return time.Time{}, fmt.Errorf("%w %q: want ISO 8601 like 2022-09-12T16:24:09.4885133Z", ErrBadTime, s)
		}
		t = t2
	}
	return t.UTC(), nil
}

// FormatTime renders t the way the service does: UTC, `Z`, as many fractional
// digits as needed (none for whole seconds).
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// UnmarshalJSON decodes a timestamp string; null leaves the zero time.
func (t *Time) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	s, ok := plainString(b)
	if !ok {
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("timestamp: %w", err)
		}
	}
	v, err := ParseTime(s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// MarshalJSON encodes the time in the service's form.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + FormatTime(t.Time) + `"`), nil
}

// TimeOf wraps a time.Time.
func TimeOf(t time.Time) *Time { return &Time{t.UTC()} }

// FlexInt is an integer that the service may send as a JSON number or as a
// numeric string ("5"). Empty strings decode as an error; use a pointer
// field for optional values (null decodes to nil).
type FlexInt int64

// UnmarshalJSON accepts 5, 5.0 and "5".
func (n *FlexInt) UnmarshalJSON(b []byte) error {
	if v, ok := plainInt(b); ok {
		*n = FlexInt(v)
		return nil
	}
	s := string(b)
	if len(s) >= 2 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		s = strings.TrimSpace(s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != float64(int64(f)) {
			return fmt.Errorf("invalid integer %s", b)
		}
		v = int64(f)
	}
	*n = FlexInt(v)
	return nil
}

// plainString returns the text of a JSON string literal that needs no
// unescaping (no backslash, no control character): the common case, decoded
// here without a second pass of encoding/json. ok is false for anything
// else, which the caller hands to encoding/json.
func plainString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	inner := b[1 : len(b)-1]
	for _, c := range inner {
		if c == '\\' || c == '"' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(inner) {
		return "", false
	}
	return string(inner), true
}

// plainInt parses a JSON number that is a plain decimal integer (an
// optional minus and up to 18 digits), the common case of FlexInt.
func plainInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// Int returns a pointer to FlexInt v, for building optional fields.
func Int(v int64) *FlexInt { n := FlexInt(v); return &n }

// Str returns a pointer to s, for building optional fields.
func Str(s string) *string { return &s }

// Bool returns a pointer to b, for building optional fields.
func Bool(b bool) *bool { return &b }

// Contact is the input of create contact (docs/api.md §2.1). Every field is
// optional; empty ones are omitted on the wire.
type Contact struct {
	ImportNumber               *FlexInt `json:"import_number,omitempty"`
	Email                      string   `json:"email,omitempty"`
	Phone                      string   `json:"phone,omitempty"`
	FirstName                  string   `json:"first_name,omitempty"`
	LastName                   string   `json:"last_name,omitempty"`
	Salutation                 string   `json:"salutation,omitempty"`
	Company                    string   `json:"company,omitempty"`
	Department                 string   `json:"department,omitempty"`
	Job                        string   `json:"job,omitempty"`
	Mobile                     string   `json:"mobile,omitempty"`
	UserField1                 string   `json:"user_field1,omitempty"`
	UserField2                 string   `json:"user_field2,omitempty"`
	UserField3                 string   `json:"user_field3,omitempty"`
	UserField4                 string   `json:"user_field4,omitempty"`
	UserField5                 string   `json:"user_field5,omitempty"`
	UserField6                 string   `json:"user_field6,omitempty"`
	UserField7                 string   `json:"user_field7,omitempty"`
	UserField8                 string   `json:"user_field8,omitempty"`
	UserField9                 string   `json:"user_field9,omitempty"`
	UserField10                string   `json:"user_field10,omitempty"`
	SalutationGenerate         *bool    `json:"salutation_generate,omitempty"`
	SalutationPrefixMale       string   `json:"salutation_prefix_male,omitempty"`
	SalutationPrefixFemale     string   `json:"salutation_prefix_female,omitempty"`
	SalutationIncludeFirstName *bool    `json:"salutation_include_first_name,omitempty"`
	SalutationIncludeLastName  *bool    `json:"salutation_include_last_name,omitempty"`
}

// CreatedContact is the result of create contact (docs/api.md §2.2).
type CreatedContact struct {
	ID        int64  `json:"id"`
	SurveyURL string `json:"survey_url"`
	CreatedAt Time   `json:"created_at"`
}

// SendRequest is the body of send message (docs/api.md §4.2); a nil ScheduledDate
// sends at once.
type SendRequest struct {
	ScheduledDate *Time `json:"scheduled_date,omitempty"`
}

// ContactsCount summarises a message's contacts (docs/api.md §2.3).
type ContactsCount struct {
	Pending int64 `json:"pending"`
	Sent    int64 `json:"sent"`
	Bounces int64 `json:"bounces"`
}

// SendResult is the result of send message (docs/api.md §2.3).
type SendResult struct {
	ContactsCount ContactsCount `json:"contacts_count"`
}

// ListQuery holds the filters of list responses (docs/api.md §4.3). Zero values are
// not sent.
type ListQuery struct {
	Page             int
	PerPage          int
	StartStartedAt   time.Time
	EndStartedAt     time.Time
	StartCompletedAt time.Time
	EndCompletedAt   time.Time
	Status           string // completed (default), disqualified, quotafull, partial
}

// ResponseList is one page of list responses (docs/api.md §2.4).
type ResponseList struct {
	PerPage int           `json:"per_page"`
	Page    int           `json:"page"`
	Total   int           `json:"total"`
	Data    []ResponseRef `json:"data"`
}

// ResponseRef is an item of a response list page.
type ResponseRef struct {
	ResponseID GUID   `json:"response_id"`
	Href       string `json:"href"`
}

// Response is one response's detail (docs/api.md §2.5).
type Response struct {
	ResponseID GUID   `json:"response_id"`
	SurveyID   int64  `json:"survey_id"`
	ContactID  *int64 `json:"contact_id,omitempty"`
	// ContactIDHash is never read from the service (json "-"):
	// pipeline/privacy sets it (and clears ContactID) when
	// privacy.fields.contact_id is hash.
	ContactIDHash  string         `json:"-"`
	DistributionID *int64         `json:"distribution_id,omitempty"`
	SurveyName     string         `json:"survey_name"`
	IPAddress      string         `json:"ip_address"`
	DateCreated    Time           `json:"date_created"`
	DateCompleted  *Time          `json:"date_completed,omitempty"`
	TotalTime      *FlexInt       `json:"total_time,omitempty"`
	ResponseStatus string         `json:"response_status"`
	URLParameters  []URLParameter `json:"url_parameters"`
	Pages          []Page         `json:"pages"`
}

// URLParameter is a URL parameter the questionnaire was opened with.
type URLParameter struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Page is a questionnaire page.
type Page struct {
	ID        int64      `json:"id"`
	Questions []Question `json:"questions"`
}

// Question is a question of a page. Title may be missing (empty).
type Question struct {
	ID       int64    `json:"id"`
	Type     string   `json:"type"`
	Title    string   `json:"title,omitempty"`
	Variable string   `json:"variable,omitempty"`
	Answers  []Answer `json:"answers"`
}

// Answer is one answer cell; every field is optional. FileID is not in the
// spec: docs/api.md's decision is that upload questions carry file GUIDs in
// Text, and in file_id when the service sends it.
type Answer struct {
	RowID       *FlexInt `json:"row_id,omitempty"`
	RowLabel    *string  `json:"row_label,omitempty"`
	ColumnID    *FlexInt `json:"column_id,omitempty"`
	ColumnLabel *string  `json:"column_label,omitempty"`
	ChoiceID    *FlexInt `json:"choice_id,omitempty"`
	ChoiceLabel *string  `json:"choice_label,omitempty"`
	OtherID     *FlexInt `json:"other_id,omitempty"`
	Text        *string  `json:"text,omitempty"`
	Value       *FlexInt `json:"value,omitempty"`
	FileID      *GUID    `json:"file_id,omitempty"`
}

// Webhook event names (docs/api.md section 11). Survey-ended events are
// undocumented; all three spellings are accepted.
const (
	EventSurveyLaunched   = "survey_launched"
	EventResponseReceived = "response_received"
	EventSurveyEnded      = "survey_ended"
	EventSurveyFinished   = "survey_finished"
	EventSurveyClosed     = "survey_closed"
)

// IsSurveyEnded reports whether name is one of the accepted survey-ended spellings.
func IsSurveyEnded(name string) bool {
	switch name {
	case EventSurveyEnded, EventSurveyFinished, EventSurveyClosed:
		return true
	}
	return false
}

// WebhookEvent is the flat JSON body the service POSTs. Only EventName and
// SurveyID are present in every event. The completed/disqualified/quota_full
// flags are recorded but never trusted: the response is always fetched.
type WebhookEvent struct {
	EventName        string `json:"event_name"`
	SurveyID         int64  `json:"survey_id"`
	ResponseID       GUID   `json:"response_id,omitempty"`
	DistributionID   *int64 `json:"distribution_id,omitempty"`
	DistributionType string `json:"distribution_type,omitempty"` // link, email, cati, kiosk
	ContactID        *int64 `json:"contact_id,omitempty"`
	Completed        *bool  `json:"completed,omitempty"`
	Disqualified     *bool  `json:"disqualified,omitempty"`
	QuotaFull        *bool  `json:"quota_full,omitempty"`
	CompletedAt      *Time  `json:"completed_at,omitempty"`
	LaunchedAt       *Time  `json:"launched_at,omitempty"`
	EndedAt          *Time  `json:"ended_at,omitempty"`
}

// ErrNotFound is matched (errors.Is) by the client's error for a 404: on a
// response detail it means the response was removed.
var ErrNotFound = errors.New("not found")
