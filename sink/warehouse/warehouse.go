// Package warehouse is the contract between the daemon and a storage
// backend: the Warehouse interface that sink/clickhouse and sink/parquet
// each build, and the neutral entry types its parts store (feed ledger,
// webhook log). It holds no implementation. Sources import it for the
// entry types, so no sink imports a source.
package warehouse

import (
	"context"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/survey"
)

// Warehouse is everything one backend stores: the response tables (Sink),
// stream checkpoints, surveys, rejects, the uploaded-files index, the feed
// ledger, and, where the backend has them, an inventory of current
// responses, the webhook log and a query connection. Close closes every
// part it opened.
type Warehouse interface {
	pipeline.Sink
	pipeline.StateStore
	pipeline.SurveyStore
	pipeline.RejectStore

	// FileIndex is the index of uploaded files, opened on first use.
	FileIndex() (files.Index, error)
	// FeedLedger is the feed ledger, opened on first use.
	FeedLedger() (FeedLedger, error)
	// Inventory is nil when the backend cannot list current responses
	// (then the poller does not reconcile).
	Inventory() Inventory
	// WebhookLog is nil when the backend keeps no webhook log.
	WebhookLog() WebhookLog
	// QueryConn is nil when the backend cannot run queries
	// (clickhouse_query feeds need one).
	QueryConn() QueryConn

	// Ping checks that the backend answers.
	Ping(ctx context.Context) error
	// String says where the data is, for people.
	String() string
	Close() error
}

// Inventory lists the responses the warehouse shows as current, with their
// status; the poller's reconcile pass compares them with the service's
// lists. HasResponse looks up one (a webhook whose response answered 404).
type Inventory interface {
	CurrentResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
	HasResponse(ctx context.Context, surveyID int64, id survey.GUID) (bool, error)
}

// QueryConn runs a query; clickhouse-go's driver.Conn implements it.
type QueryConn interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// ContactEntry is one record of the feed ledger (table pushed_contacts).
type ContactEntry struct {
	Feed           string    `json:"feed"`
	Key            string    `json:"key"`
	DistributionID int64     `json:"distribution_id"`
	State          string    `json:"state"`
	ContactID      int64     `json:"contact_id,omitempty"`
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
// implementations may call fn only with the latest entry.
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
