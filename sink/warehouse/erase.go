package warehouse

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Reasons of an erasure (Erasure.Reason).
const (
	ReasonDeletedAtSource = "deleted_at_source" // sync.erase_deleted: the service answered 404 or status deleted
	ReasonRequest         = "request"           // surveysync erase --survey S --response ID
	ReasonContactRequest  = "contact_request"   // surveysync erase --contact ID
)

// States of an erasure (Erasure.State).
const (
	// ErasureStarted: the tombstone is durable and the pipeline no longer
	// writes the response; its rows and files may still exist. Whoever
	// finds it (the daemon at start and every refresh, the next erase
	// command) carries it through.
	ErasureStarted = "started"
	// ErasureDone: every row and object of the response was removed.
	ErasureDone = "done"
)

// ResponseKey names one response.
type ResponseKey struct {
	SurveyID   int64
	ResponseID survey.GUID
}

// Erasure is the audit row of one erased response, which is also its
// tombstone: table erasures in ClickHouse, _state/erasures.jsonl beside
// Parquet files. It holds no personal data: ids, times, a reason and the
// counts of what was removed.
type Erasure struct {
	ResponseKey
	Reason      string    // ReasonDeletedAtSource, ReasonRequest, ReasonContactRequest
	State       string    // ErasureStarted or ErasureDone
	RequestedAt time.Time // when the tombstone was written (UTC)
	CompletedAt time.Time // when State became done; zero before
	// Erased says what was removed, as "table=rows" pairs separated by
	// spaces in a fixed order, e.g. "responses=2 answers=24 objects=1".
	// Counts of a run that resumed a crashed one hold what that run found.
	Erased string
}

// Eraser removes responses physically, and keeps their audit rows. A
// backend that cannot erase returns nil from Warehouse.Eraser.
type Eraser interface {
	// RecordErasures writes audit rows durably; a later row of the same
	// response replaces an earlier one (its state moves on).
	RecordErasures(ctx context.Context, es []Erasure) error
	// Erasures returns the latest audit row of every erased response.
	Erasures(ctx context.Context) ([]Erasure, error)
	// EraseRows removes every row of the responses from every table the
	// backend keeps (responses, answers, uploaded_files, webhook_events,
	// rejects) and returns how many rows it found per table. It is
	// idempotent, and returns only once the rows are gone from what
	// readers see (a ClickHouse mutation is waited for).
	EraseRows(ctx context.Context, keys []ResponseKey) (map[string]int64, error)
	// ResponsesOfContact lists the responses of one contact: by
	// contact_id, or by contact_id_hash when hash is not "" (privacy.fields.
	// contact_id: hash), on every version (a response that changed contact
	// is erased too).
	ResponsesOfContact(ctx context.Context, contactID int64, hash string) ([]ResponseKey, error)
	// EraseContact removes the feed ledger's rows of one contact (its
	// pushed_contacts rows) and returns how many it found.
	EraseContact(ctx context.Context, contactID int64, hash string) (int64, error)
}
