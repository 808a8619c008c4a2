// Package pipeline moves responses from the sources (poller, webhooks) to the
// sinks: fetch each response's detail concurrently, flatten it into Arrow
// records, batch by rows, bytes and time, write, then acknowledge. It
// declares the interfaces its neighbours implement; it imports none of the
// project's packages but its own subpackages and internal/permanent.
//
// Retries of writes belong here: the pipeline retries a failed write with
// backoff until it succeeds, unless the error is permanent (permanent.Is).
// A response that can never be stored — its detail cannot be decoded
// (fetch), cannot be flattened into rows (flatten), or the sink refuses its
// rows (write) — is recorded in the RejectStore with its reason, counted
// (surveysync_rejected_total{stage,reason}) and acknowledged, so that it
// neither pins its stream's watermark nor blocks the other responses.
package pipeline

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
)

// Fetcher reads one response's detail. source/surveyapi's client implements
// it. An error matching survey.ErrNotFound means the response was removed.
type Fetcher interface {
	GetResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (*survey.Response, error)
}

// Sink writes batches durably. Write returns nil only once every row of the
// batch is durable; it may be called again with the same batch after an
// error, and must not create visible duplicates when it is. Write does not
// release the batch.
type Sink interface {
	Write(ctx context.Context, b *flatten.Batch) error
}

// Stream names: one per list status filter (docs/api.md §4.3).
const (
	StreamCompleted    = survey.StatusCompleted
	StreamDisqualified = survey.StatusDisqualified
	StreamQuotaFull    = survey.StatusQuotaFull
	StreamPartial      = survey.StatusPartial
)

// StreamState is the checkpoint of one survey's stream (table sync_state).
type StreamState struct {
	SurveyID  int64
	Stream    string
	Watermark time.Time // every response of the stream up to here is durably written
	LastRunAt time.Time
	LastError string
	Synced    int64 // responses written by this stream, all time
	UpdatedAt time.Time

	// The cycle in flight, saved every few seconds while it runs (a
	// backfill can take minutes): when it started, how many responses its
	// lists announced, how many are written. Zero when no cycle runs.
	CycleStartedAt time.Time
	CycleListed    int64
	CycleDone      int64
}

// InCycle reports whether s was saved by a cycle still in flight.
func (s StreamState) InCycle() bool { return !s.CycleStartedAt.IsZero() && s.CycleStartedAt.Unix() > 0 }

// StateStore keeps stream checkpoints. sink/clickhouse keeps them in
// sync_state; sink/parquet in a small file beside the data.
type StateStore interface {
	LoadStates(ctx context.Context) ([]StreamState, error)
	SaveStates(ctx context.Context, states []StreamState) error
}

// SurveyInfo is a row of the surveys table.
type SurveyInfo struct {
	SurveyID   int64
	Name       string
	LaunchedAt *time.Time
	EndedAt    *time.Time
	FirstSeen  time.Time
	LastSeen   time.Time
}

// SurveyStore keeps what is known about surveys (table surveys).
type SurveyStore interface {
	LoadSurveys(ctx context.Context) ([]SurveyInfo, error)
	SaveSurveys(ctx context.Context, surveys []SurveyInfo) error
}

// Stages of the pipeline a response can be rejected at (Reject.Stage).
const (
	StageFetch   = "fetch"   // the detail could not be read or decoded (a permanent client error)
	StageFlatten = "flatten" // the detail cannot be turned into rows (flatten.Add's checks)
	StageWrite   = "write"   // the sink refuses the response's rows permanently
)

// Reject is a response the pipeline gave up on: it is not in the
// responses/answers tables at this version, and its ref was acknowledged so
// that the stream moves on. It is read again only when the poller or a
// webhook submits it again (an overlap re-read, reconcile, a new webhook);
// a re-read whose outcome is unchanged is not recorded twice by the same
// process.
type Reject struct {
	SurveyID   int64
	ResponseID survey.GUID
	Stage      string    // StageFetch, StageFlatten or StageWrite
	Reason     string    // permanent.Reason of the error, e.g. "decode", "date_out_of_range"; "unknown" when it has none
	Error      string    // the error's text (at most MaxRejectErrorBytes); the client's errors carry no secrets
	Source     string    // the ref's source: poll, webhook, reconcile
	RejectedAt time.Time // UTC
	// ListedStatus is the status of the list that showed the response when
	// it was rejected (Ref.ListedStatus; "" when no list did, e.g. a
	// webhook). The sinks' RejectedResponses return it: a response listed
	// at that status again is unchanged and not read again, also after a
	// restart (issue 19).
	ListedStatus string
}

// MaxRejectErrorBytes bounds Reject.Error.
const MaxRejectErrorBytes = 2048

// RejectStore keeps reject records: sink/clickhouse in table rejects,
// sink/parquet in <dir>/rejects/*.jsonl. WriteRejects returns nil only once
// every record is durable; the pipeline retries other errors with backoff
// (the refs wait), except permanent ones (the refs then hear the error and
// are read again later). Writing a record twice must be harmless.
type RejectStore interface {
	WriteRejects(ctx context.Context, rejects []Reject) error
}
