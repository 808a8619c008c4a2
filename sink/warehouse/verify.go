package warehouse

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// VerifyReader reads what the package verify compares with the service's
// lists (surveysync verify, the daemon's verification): counts of current
// responses by status and date range, the ids in a range, a random sample,
// and a response's current content. It only reads. A reader is meant for
// one verification pass: the Parquet backend reads a survey's files once
// per reader and answers every question of the pass from that snapshot;
// ClickHouse asks responses_current and answers_current each time.
type VerifyReader interface {
	// Count counts the current responses in r and finds a date that
	// splits them in two halves.
	Count(ctx context.Context, r Range) (RangeCount, error)
	// IDs returns the current responses in r with their status.
	IDs(ctx context.Context, r Range) (map[survey.GUID]string, error)
	// Sample returns up to n current responses of a survey picked at
	// random (all of them when it has n or fewer).
	Sample(ctx context.Context, surveyID int64, n int) ([]survey.GUID, error)
	// Content returns the current rows of the given responses of a
	// survey; a response that is not current is left out.
	Content(ctx context.Context, surveyID int64, ids []survey.GUID) (map[survey.GUID]Content, error)
}

// Range selects current (latest version, not deleted) responses of one
// survey whose response_status is one of Statuses and whose date falls in
// [From, To): date_created when Started (the partial stream, which the
// service lists by start), else date_completed (date_created when it has
// none). A zero From or To is no bound. Dates are compared to the second:
// a response at 10:00:00.7 is in [10:00:00, 10:00:01).
type Range struct {
	SurveyID int64
	Statuses []string
	Started  bool
	From, To time.Time
}

// RangeCount is a range's count and a split date: Mid is the median date of
// the range's responses truncated to the second (zero when N is 0), so that
// [From, Mid) and [Mid, To) each hold about half of them.
type RangeCount struct {
	N   int64
	Mid time.Time
}

// Content is what a response's current rows say, in the fields that the
// service's detail gives and no privacy rule rewrites differently on the
// two sides: its status, dates (to the second) and answer cells in page,
// question and answer order.
type Content struct {
	Status    string
	Created   time.Time // UTC, to the second
	Completed time.Time // UTC, to the second; zero when none
	Answers   []Answer
}

// Answer is one answer cell (a row of answers_current).
type Answer struct {
	PageID, QuestionID                 int64
	RowID, ColumnID, ChoiceID, OtherID OptInt
	Value                              OptInt
	Text                               string
}

// OptInt is a nullable integer column.
type OptInt struct {
	V     int64
	Valid bool
}

// Opt returns p as an OptInt (invalid when nil).
func Opt(p *int64) OptInt {
	if p == nil {
		return OptInt{}
	}
	return OptInt{V: *p, Valid: true}
}

// Equal reports whether two contents are the same.
func (c Content) Equal(o Content) bool {
	if c.Status != o.Status || !c.Created.Equal(o.Created) || !c.Completed.Equal(o.Completed) || len(c.Answers) != len(o.Answers) {
		return false
	}
	for i := range c.Answers {
		if c.Answers[i] != o.Answers[i] {
			return false
		}
	}
	return true
}

// Second truncates t to the second, in UTC (the zero time stays zero).
func Second(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Second)
}
