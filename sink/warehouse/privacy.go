package warehouse

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/privacy"
)

// PrivacyStore keeps the record of the privacy rules in effect when the
// warehouse's data was written, and rewrites that data when stricter rules
// are applied to it (surveysync privacy apply; docs/privacy.md, "Changing
// the rules on an existing warehouse").
type PrivacyStore interface {
	// PrivacyRules returns the recorded rules (privacy.Rules as JSON); nil
	// when none were recorded (a new warehouse, or one written before the
	// record existed); a *DamagedRecordError when a record exists and is
	// not what was written (a file cut short or overwritten).
	PrivacyRules(ctx context.Context) ([]byte, error)
	// RecordPrivacyRules records rules durably, replacing the former ones.
	RecordPrivacyRules(ctx context.Context, rules []byte) error
	// HasData reports whether any response row is written.
	HasData(ctx context.Context) (bool, error)
	// ApplyPrivacy rewrites the rows already written as d says — in
	// responses, answers, the feed ledger, the webhook log — and removes
	// the index rows of uploaded files whose question d drops, after
	// calling deleteObjects with them (nil: no files are copied). It
	// returns the rows changed per table. It is idempotent: run again
	// after a crash, it finishes what is left.
	ApplyPrivacy(ctx context.Context, d *privacy.Delta, deleteObjects func(context.Context, []files.FileRef) error) (map[string]int64, error)
}

// DamagedRecordError is PrivacyRules' error for a record that exists but
// cannot be read: which rules the data was written under is unknown.
type DamagedRecordError struct {
	Where string // the file or table
	Err   error
}

func (e *DamagedRecordError) Error() string {
	return fmt.Sprintf("the record of the privacy rules, %s, is damaged (%v)", e.Where, e.Err)
}

func (e *DamagedRecordError) Unwrap() error { return e.Err }
