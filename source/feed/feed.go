// Package feed pushes contacts from configured feeds into the survey
// service's distribution channels (docs/api.md §4.1) and triggers email sends
// (docs/api.md §4.2): each feed row once, every outcome audited in a Ledger.
//
// Three kinds of feed share one pipeline (see docs/feeds.md):
//
//   - csv_dir: CSV (header, UTF-8 with or without BOM, `,` or `;` detected, or
//     any configured one-character delimiter) and JSONL
//     files dropped into a folder. A file is claimed by renaming it into
//     processing/, read as a stream, then moved to done/ with a report, or to
//     failed/ when it cannot be read at all.
//   - http: an authenticated POST endpoint taking a JSON array of contacts (or
//     one contact) and answering per row.
//   - clickhouse_query: a SQL query run every Interval (reverse ETL).
//
// Every row is mapped onto a survey.Contact, validated before any call, and
// keyed (a source column or a hash of the mapped row). The once-only rule:
// the Ledger durably records the INTENT for a chunk of rows before their
// POSTs and settles each row afterwards (pushed with contact id and survey
// URL, failed with the service's message, or uncertain). A key settled as
// pushed is never pushed again; a key whose intent was never settled (the
// process died in between) is reported as uncertain and left for the operator
// (docs/feeds.md "The one gap").
//
// After a batch (a file, an HTTP request, a query run) that pushed at least
// one new contact, the feed's message is sent once for that batch, the send
// intent being recorded first, with a scheduled date from the policy
// (immediate, delay, or the next opening of a weekly window in a time zone).
package feed

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/survey"
)

// Feed types.
const (
	TypeCSVDir          = "csv_dir"
	TypeHTTP            = "http"
	TypeClickHouseQuery = "clickhouse_query"
)

// Channels: which contact field a row must carry. Empty: no requirement.
const (
	ChannelEmail = "email"
	ChannelCATI  = "cati"
)

// DedupeHash as DedupeKey keys a row by a hash of its mapped contact.
const DedupeHash = "hash"

// Schedule policies of a send.
const (
	PolicyImmediate = "immediate"
	PolicyDelay     = "delay"
	PolicyWindow    = "window"
)

// Options configure one feed. The lead maps the YAML `feeds[]` onto it.
type Options struct {
	Name           string // unique; letters, digits, '.', '_' and '-'
	Type           string // csv_dir | http | clickhouse_query
	DistributionID int64  // the email campaign or CATI channel receiving the contacts
	Channel        string // email | cati | "" (no channel-specific requirement)
	// Mapping maps a contact field of docs/api.md §2.1 (email, first_name,
	// user_field1, import_number, salutation_generate, …) to a source column.
	Mapping    map[string]string
	Salutation Salutation
	// DedupeKey is a source column whose value keys a row, or "hash" (the
	// default): a SHA-256 of the mapped contact.
	DedupeKey string
	// Interval: how often a csv_dir folder is polled (default 5s) and a
	// clickhouse_query is run (default 1h).
	Interval        time.Duration
	CSVDir          CSVDirOptions
	HTTP            HTTPOptions
	ClickHouseQuery QueryOptions
	Send            SendOptions
	// Concurrency is the number of create-contact calls in flight (default 8).
	// The API client's rate limit applies on top of it.
	Concurrency int
	// ChunkRows is how many rows share one durable intent record (default
	// 100). After a hard crash at most this many rows can be uncertain.
	ChunkRows int
}

// Salutation holds the salutation flags sent with every contact of the feed
// (docs/api.md §2.1); a mapped column of the same field overrides them per row.
type Salutation struct {
	Generate         bool
	PrefixMale       string // e.g. "Vážený pane"
	PrefixFemale     string // e.g. "Vážená paní"
	IncludeFirstName bool
	IncludeLastName  bool
}

// CSVDirOptions configure a csv_dir feed.
type CSVDirOptions struct {
	Dir       string // files are dropped here; processing/, done/, failed/ are created inside
	Delimiter string // one character (",", ";", "\t", …); empty detects "," or ";" from the header line
	// MaxRecordBytes caps a CSV record (a line, or the lines of a quoted
	// field) and a JSONL line (default DefaultMaxRecordBytes, 1 MiB). A
	// longer CSV record fails the file (to failed/: a quote left open would
	// otherwise swallow the rest of it); a longer JSONL line is an invalid
	// row. Config key feeds[].csv_dir.max_record_bytes.
	MaxRecordBytes int64
}

// HTTPOptions configure an http feed.
type HTTPOptions struct {
	Path   string // e.g. /feeds/crm; Runner.Handler serves it
	Token  string // bearer token the caller must present
	Listen string // optional own listener (host:port); empty: mount Runner.Handler yourself
	// MaxBodyBytes caps a request body (default 16 MiB).
	MaxBodyBytes int64
}

// QueryOptions configure a clickhouse_query feed.
type QueryOptions struct {
	Query string
	Conn  QueryConn // the warehouse's QueryConn()
}

// QueryConn runs a query (record); the ClickHouse warehouse's
// QueryConn implements it, so this package links no database driver.
type QueryConn = record.QueryConn

// SendOptions configure the send triggered after a batch. MessageID 0: no send.
type SendOptions struct {
	MessageID int64
	Schedule  Schedule
}

// Schedule says when a triggered send goes out.
type Schedule struct {
	Policy string        // immediate (default) | delay | window
	Delay  time.Duration // for delay
	Window Window        // for window
}

// Window is a weekly sending window, e.g. Monday–Friday 09:00–17:00
// Europe/Prague. A send triggered inside it goes out at once; outside it, at
// the next opening.
type Window struct {
	Days     []time.Weekday // empty: every day
	From, To string         // "HH:MM" local time, From < To
	TimeZone string         // IANA name; empty: UTC
}

// API is the part of the survey API client the feeds use
// (source/surveyapi.Client implements it).
type API interface {
	CreateContact(ctx context.Context, distributionID int64, c survey.Contact) (*survey.CreatedContact, error)
	SendMessage(ctx context.Context, distributionID, messageID int64, req survey.SendRequest) (*survey.SendResult, error)
}

// Row states in the ledger.
const (
	StateIntent    = "intent"    // recorded before the POST
	StatePushed    = "pushed"    // created: ContactID and SurveyURL set
	StateFailed    = "failed"    // not created (a 4xx or a final error): pushed again by a later batch
	StateUncertain = "uncertain" // may or may not have been created: never pushed again automatically
	// StateReleased ends an intent whose call this daemon knows it never
	// made (its lease lapsed between the intent and the call): pushed
	// again by a later batch, like failed. Its version is the intent's + 1,
	// so it overrides that intent and nothing recorded after it.
	StateReleased = "released"
)

// Ledger entries and the Ledger itself are the neutral types of record
// that the warehouse stores: sink/clickhouse and sink/parquet each keep one.
type (
	ContactEntry = record.ContactEntry
	SendEntry    = record.SendEntry
	Ledger       = record.FeedLedger
)

// Send states in the ledger.
const (
	SendIntent    = "intent"
	SendSent      = "sent"
	SendFailed    = "failed"
	SendUncertain = "uncertain"
	// SendReleased ends a send intent whose call was never made (the lease
	// lapsed in between): the batch's send is triggered by a later run.
	SendReleased = "released"
)

// Defaults of the options that config also defaults (a zero option and an
// unset key mean the same: config refers to these).
const (
	DefaultConcurrency    = 8
	DefaultCSVDirInterval = 5 * time.Second
	DefaultQueryInterval  = time.Hour
	DefaultMaxBodyBytes   = 16 << 20
	DefaultMaxRecordBytes = 1 << 20
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (o *Options) setDefaults() {
	if o.DedupeKey == "" {
		o.DedupeKey = DedupeHash
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.ChunkRows <= 0 {
		o.ChunkRows = 100
	}
	if o.Interval <= 0 {
		switch o.Type {
		case TypeClickHouseQuery:
			o.Interval = DefaultQueryInterval
		default:
			o.Interval = DefaultCSVDirInterval
		}
	}
	if o.HTTP.MaxBodyBytes <= 0 {
		o.HTTP.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.CSVDir.MaxRecordBytes <= 0 {
		o.CSVDir.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.Send.Schedule.Policy == "" {
		o.Send.Schedule.Policy = PolicyImmediate
	}
}

// validate checks the options and returns the first problem found.
func (o *Options) validate() error {
	if !nameRE.MatchString(o.Name) {
		return fmt.Errorf("feed name %q: use letters, digits, '.', '_' and '-'", o.Name)
	}
	errf := func(format string, a ...any) error {
		return fmt.Errorf("feed %s: %s", o.Name, fmt.Sprintf(format, a...))
	}
	if o.DistributionID <= 0 {
		return errf("distribution_id must be set")
	}
	switch o.Channel {
	case "", ChannelEmail, ChannelCATI:
	default:
		return errf("channel %q: want email, cati or empty", o.Channel)
	}
	if len(o.Mapping) == 0 {
		return errf("mapping is empty")
	}
	for field, col := range o.Mapping {
		if _, ok := contactFields[field]; !ok {
			return errf("mapping: unknown contact field %q (docs/api.md §2.1)", field)
		}
		if col == "" {
			return errf("mapping: field %q has no source column", field)
		}
	}
	switch o.Type {
	case TypeCSVDir:
		if o.CSVDir.Dir == "" {
			return errf("csv_dir.dir must be set")
		}
		if d := []rune(o.CSVDir.Delimiter); len(d) > 1 || (len(d) == 1 && (d[0] == '"' || d[0] == '\r' || d[0] == '\n' || d[0] == utf8.RuneError)) {
			return errf("csv_dir.delimiter %q: want one character such as ',', ';' or a tab (or empty to detect ',' or ';')", o.CSVDir.Delimiter)
		}
	case TypeHTTP:
		if o.HTTP.Path == "" || o.HTTP.Path[0] != '/' {
			return errf("http.path must start with '/'")
		}
		if o.HTTP.Token == "" {
			return errf("http.token must be set")
		}
	case TypeClickHouseQuery:
		if o.ClickHouseQuery.Query == "" {
			return errf("clickhouse_query.query must be set")
		}
		if o.ClickHouseQuery.Conn == nil {
			return errf("clickhouse_query needs a ClickHouse connection (configure clickhouse)")
		}
	default:
		return errf("type %q: want csv_dir, http or clickhouse_query", o.Type)
	}
	if o.Send.MessageID < 0 {
		return errf("send.message_id must be positive")
	}
	if o.Send.MessageID > 0 {
		if _, err := o.Send.Schedule.next(time.Now()); err != nil {
			return errf("send.schedule: %v", err)
		}
	}
	return nil
}

// ErrUnknownFeed is returned for a feed name that is not configured.
var ErrUnknownFeed = errors.New("unknown feed")
