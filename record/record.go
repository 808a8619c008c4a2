// Package record holds the neutral entry types the warehouse's parts store
// for the sources (feed ledger, webhook log) and the small interfaces those
// sources use to reach them (FeedLedger, WebhookLog, QueryConn). It is a
// leaf: it imports only the standard library, so source/feed and webhookrx
// can name these types without linking a backend or the pipeline.
// sink/warehouse returns them; sink/clickhouse and sink/parquet implement
// them.
package record

import (
	"context"
	"reflect"
	"time"
)

// ContactEntry is one record of the feed ledger (table pushed_contacts).
type ContactEntry struct {
	Feed           string    `json:"feed"`
	Key            string    `json:"key"`
	DistributionID int64     `json:"distribution_id"`
	State          string    `json:"state"`
	ContactID      int64     `json:"contact_id,omitempty"`
	ContactIDHash  string    `json:"contact_id_hash,omitempty"` // privacy.fields.contact_id: hash (ContactID is then 0)
	SurveyURL      string    `json:"survey_url,omitempty"`
	Error          string    `json:"error,omitempty"`
	BatchID        string    `json:"batch_id"`
	File           string    `json:"file,omitempty"`
	Line           int64     `json:"line,omitempty"`
	UpdatedAt      time.Time `json:"updated_at"`
	Version        uint64    `json:"_version"`
}

// SendEntry is one record of a triggered send (table message_sends).
type SendEntry struct {
	Feed           string     `json:"feed"`
	BatchID        string     `json:"batch_id"`
	DistributionID int64      `json:"distribution_id"`
	MessageID      int64      `json:"message_id"`
	State          string     `json:"state"`
	ScheduledDate  *time.Time `json:"scheduled_date,omitempty"`
	Contacts       int64      `json:"contacts"` // new contacts the batch pushed
	Pending        int64      `json:"pending"`
	Sent           int64      `json:"sent"`
	Bounces        int64      `json:"bounces"`
	Error          string     `json:"error,omitempty"`
	At             time.Time  `json:"at"`
	Version        uint64     `json:"_version"`
}

// FeedLedger is the durable audit of pushes and sends. Record* return only
// once the entries are durable. Load* call fn for the entries of one feed;
// for a given key (or batch) a later call overrides an earlier one, and
// implementations may call fn only with the latest entry. "Later" is the
// highest Version for ClickHouse (argMax) and the recording order for the
// file ledger: source/feed records so that both agree, and its loader
// applies a release (state "released", Version = its intent's + 1) only
// to the intent it follows.
type FeedLedger interface {
	LoadContacts(ctx context.Context, feed string, fn func(ContactEntry) error) error
	RecordContacts(ctx context.Context, entries []ContactEntry) error
	LoadSends(ctx context.Context, feed string, fn func(SendEntry) error) error
	RecordSend(ctx context.Context, e SendEntry) error
}

// WebhookEvent is one entry of the log of processed webhooks (table
// webhook_events).
type WebhookEvent struct {
	EventID     string
	EventName   string
	SurveyID    int64
	ResponseID  string // lower-case GUID; empty when the event has none
	ReceivedAt  time.Time
	ProcessedAt time.Time
	Outcome     string // processed, ignored, rejected
	Error       string // the Permanent error for rejected events
	Attempts    int    // Process calls, 0 for ignored events
	Body        string // raw body
}

// WebhookLog keeps the raw log of processed webhook events. LogEvents
// returns nil only once the entries are durable.
type WebhookLog interface {
	LogEvents(ctx context.Context, events []WebhookEvent) error
}

// QueryConn runs a query and streams its rows (clickhouse_query feeds,
// `surveysync check`). sink/clickhouse adapts its connection to it, so
// callers need no database driver.
type QueryConn interface {
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is a query's result, read one row at a time. Close must be called.
type Rows interface {
	Columns() []string
	ColumnTypes() []ColumnType
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// ColumnType describes one result column: ScanType is the Go type Scan
// fills for it.
type ColumnType interface {
	ScanType() reflect.Type
}
