package warehouse

import (
	"context"
	"time"
)

// Methods of a verification pass (VerifyRun.Method).
const (
	// VerifyCounts is the daemon's pass every verify.interval: counts
	// first, ids only where they differ, and a sample of contents.
	VerifyCounts = "counts"
	// VerifyReconcile is the full id comparison every
	// sync.reconcile_interval (the poller's reconcile).
	VerifyReconcile = "reconcile"
)

// Results of a verification pass (VerifyRun.Result, PassResult), also the
// values of surveysync_verify_passes_total{result}.
const (
	VerifyClean = "clean" // nothing differed
	VerifyDrift = "drift" // something differed (and was repaired with verify.repair)
	VerifyError = "error" // the pass could not compare
)

// VerifyRun is one stream's outcome in one verification pass: table
// verify_runs in ClickHouse, _state/verify_runs.jsonl beside Parquet files
// (docs/schema.md). Counts are what the pass found before it repaired.
type VerifyRun struct {
	SurveyID   int64
	Stream     string
	Method     string // VerifyCounts or VerifyReconcile
	StartedAt  time.Time
	FinishedAt time.Time
	// Service is the number of responses the service lists in the stream;
	// Warehouse the current responses the warehouse holds in it (-1:
	// not known, the pass failed before).
	Service, Warehouse int64
	// Missing: listed, not current in the warehouse; Extra: current in the
	// warehouse, not listed; Content: sampled responses whose current rows
	// differ from a fresh read of their detail.
	Missing, Extra, Content int64
	Sampled                 int64  // responses re-read and compared
	Repaired                int64  // responses re-read through the pipeline
	Result                  string // this stream's: VerifyClean, VerifyDrift or VerifyError
	// PassResult is the survey's whole pass (every stream): a survey was
	// last verified clean at the latest FinishedAt whose PassResult is
	// VerifyClean.
	PassResult string
	Error      string // why a pass failed; no secret, no respondent's value
	APICalls   int64  // calls of the survey's pass (the same on each of its rows)
}

// VerifyState is the latest verification of one survey, for surveysync
// status.
type VerifyState struct {
	SurveyID  int64
	LastPass  time.Time // the latest pass's end
	LastClean time.Time // the latest clean pass's end; zero: never
	Result    string    // the latest pass's result
	// Latest is the latest row of each stream.
	Latest []VerifyRun
}

// VerifyLog keeps the history of verification passes.
type VerifyLog interface {
	// RecordVerifyRuns appends rows durably.
	RecordVerifyRuns(ctx context.Context, runs []VerifyRun) error
	// VerifyStates returns, per survey, the latest pass and the latest
	// clean one, ordered by survey id.
	VerifyStates(ctx context.Context) ([]VerifyState, error)
}
