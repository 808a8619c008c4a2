// Package warehouse is the contract between the daemon and a storage
// backend: the Warehouse interface that sink/clickhouse and sink/parquet
// each build. It holds no implementation. The neutral entry types its parts
// store (feed ledger, webhook log) and the query connection live in the
// leaf package record, which the sources import instead of this one.
package warehouse

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/survey"
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
	FeedLedger() (record.FeedLedger, error)
	// Inventory is nil when the backend cannot list current responses
	// (then the poller does not reconcile).
	Inventory() Inventory
	// WebhookLog is nil when the backend keeps no webhook log.
	WebhookLog() record.WebhookLog
	// Eraser is nil when the backend cannot erase responses physically
	// (sync.erase_deleted, surveysync erase).
	Eraser() Eraser
	// QueryConn is nil when the backend cannot run queries
	// (clickhouse_query feeds need one).
	QueryConn() record.QueryConn
	// Leases is nil when the backend keeps no leases of the daemons
	// writing it (the Parquet folder is locked on disk instead).
	Leases() Leases
	// VerifyLog keeps the history of verification passes (verify_runs).
	VerifyLog() VerifyLog
	// Privacy records the privacy rules in effect and rewrites written
	// data for stricter ones.
	Privacy() PrivacyStore
	// Verifier reads what verification compares with the service
	// (package verify): a new reader per pass.
	Verifier() VerifyReader
	// Exporter reads a survey's current rows (surveysync export).
	Exporter() Exporter
	// Summarizer counts the current responses per survey and status
	// (surveysync query).
	Summarizer() Summarizer

	// Ping checks that the backend answers.
	Ping(ctx context.Context) error
	// CheckWrites checks, storing nothing, that every table (or folder)
	// the daemon writes takes a write (surveysync doctor): one check each.
	CheckWrites(ctx context.Context) []WriteCheck
	// String says where the data is, for people.
	String() string
	Close() error
}

// WriteCheck is the outcome of one of CheckWrites's checks.
type WriteCheck struct {
	Table string // what was checked: a table's full name, or a folder
	Err   error  // nil when it takes writes; the server's refusal otherwise (a *pipeline.WriteError for ClickHouse)
	Fix   string // the operator's next step when Err is set
}

// Inventory lists the responses the warehouse shows as current, with their
// status; the poller's reconcile pass compares them with the service's
// lists. HasResponse looks up one (a webhook whose response answered 404).
type Inventory interface {
	CurrentResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
	HasResponse(ctx context.Context, surveyID int64, id survey.GUID) (bool, error)
}

// RejectInventory is implemented by an Inventory that can list a survey's
// responses rejected when a list showed them and not written since, with
// the status of that list (pipeline.Reject.ListedStatus): the poller holds
// them as rejected after a restart, so that an unchanged one is not read
// again (issue 19).
type RejectInventory interface {
	RejectedResponses(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
}

// Lease is one daemon's claim on the warehouse (the single-instance guard,
// docs/operations.md): who it is, renewed by a heartbeat.
type Lease struct {
	ID      string // random, one per daemon start
	Host    string
	PID     int
	Started time.Time
	Version string // surveysync's
	// HeartbeatAge is how long ago the lease was last renewed, by the
	// warehouse's clock, as read by Live.
	HeartbeatAge time.Duration
}

// Leases are the daemons' leases on the warehouse. Renew and Release write
// the warehouse's own time, so the machines' clocks do not matter.
type Leases interface {
	// Live are the leases renewed within the last `within`, not released.
	Live(ctx context.Context, within time.Duration) ([]Lease, error)
	// Renew records l's heartbeat now.
	Renew(ctx context.Context, l Lease) error
	// Release marks l released: the next daemon need not wait for it to
	// expire.
	Release(ctx context.Context, l Lease) error
}
