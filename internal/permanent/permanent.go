// Package permanent holds the project's one notion of a permanent error: a
// failure that asking again cannot fix (bad data from the service, a
// forbidden survey, a batch ClickHouse refuses). Whoever owns the retries of
// a path checks Is before retrying; whoever records failures uses Reason.
//
// Wrap an error with New (or Errorf); test with Is. A permanent error stays
// permanent through further wrapping with fmt.Errorf("...: %w", err).
package permanent

import (
	"errors"
	"fmt"
)

// Error is a permanent failure. Reason is a short machine-friendly class
// (e.g. "bad_date", "decode", "forbidden", "too_many_answers") used as a
// metric label and in reject records; Err is the underlying error.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return "permanent error: " + e.Reason
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// New marks err as permanent with the given reason. It returns nil for a nil
// err.
func New(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

// Errorf is New(reason, fmt.Errorf(format, args...)).
func Errorf(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Is reports whether err, or any error it wraps, is permanent.
func Is(err error) bool {
	var p *Error
	return errors.As(err, &p)
}

// Reason returns the reason of the outermost permanent error in err's
// chain, or "" when err is not permanent.
func Reason(err error) string {
	var p *Error
	if errors.As(err, &p) {
		return p.Reason
	}
	return ""
}
