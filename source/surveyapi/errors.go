package surveyapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

// Sentinel errors. Every error the client returns for an HTTP status is an
// *APIError whose Is method matches the sentinel of its class, so callers
// write errors.Is(err, surveyapi.ErrUnauthorized) or
// errors.Is(err, survey.ErrNotFound) without looking at status codes.
var (
	// ErrBadRequest matches 400 and 405 (the service's "required fields
	// missing") and any other unexpected 4xx. Permanent: the service's
	// message says what is wrong.
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized matches 401 and the calls the client refuses to make
	// while the token is known to be rejected (see Client.Healthy).
	ErrUnauthorized = errors.New("API token rejected")
	// ErrQuotaExceeded matches 402: the plan's monthly quota is used up, the
	// plan expired or it lacks API access. The client pauses every call for
	// Options.QuotaPause, then resumes by itself.
	ErrQuotaExceeded = errors.New("API quota exceeded or plan without API access")
	// ErrForbidden matches 403 (no rights to that data). Permanent.
	ErrForbidden = errors.New("forbidden")
	// ErrRateLimited matches a 429 that was still answered after the last retry.
	ErrRateLimited = errors.New("rate limited")
	// ErrServer matches a 5xx that was still answered after the last retry.
	ErrServer = errors.New("server error")
	// ErrMalformed matches a body the client cannot understand: not JSON, an
	// HTML page, a result of the wrong shape, a required field missing.
	// Permanent: asking again is not expected to help.
	ErrMalformed = errors.New("malformed response")
	// ErrUncertain matches a POST (create contact, send message) whose
	// outcome is unknown: the request was sent, then the attempt timed out,
	// the connection was reset, or the caller's context ended before the
	// answer. The client never retries such a call by itself; the service
	// may or may not have acted on it. Report it to an operator.
	ErrUncertain = errors.New("request sent but outcome unknown")
	// ErrNetwork matches a connection-level failure (refused, reset, DNS,
	// TLS, timeout) that remained after the last retry.
	ErrNetwork = errors.New("network error")
	// ErrTimeout matches an attempt that exceeded Options.Timeout; it also
	// matches ErrNetwork.
	ErrTimeout = errors.New("timeout")
	// ErrInvalidArgument matches a call the client refused before sending,
	// e.g. an empty response id.
	ErrInvalidArgument = errors.New("invalid argument")
)

// APIError is the error of a call the service answered with a non-success
// status. Its text names the operation, the status, the service's request id
// and the service's message; never the API token.
type APIError struct {
	Op        string // operation label: create_contact, send_message, list_responses, get_response, download_file, ping
	Status    int    // HTTP status
	RequestID string // meta.requestId / meta.request_id of the error body, or "" when none came
	Message   string // the service's error messages joined by "; ", or a snippet of a non-JSON body
}

func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString("surveyapi: ")
	b.WriteString(e.Op)
	fmt.Fprintf(&b, ": HTTP %d %s", e.Status, http.StatusText(e.Status))
	if e.RequestID != "" {
		b.WriteString(" (request id ")
		b.WriteString(e.RequestID)
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is matches the sentinel of the status's class (see the Err* variables and
// survey.ErrNotFound).
func (e *APIError) Is(target error) bool {
	return target != nil && target == sentinelFor(e.Status)
}

func sentinelFor(status int) error {
	switch {
	case status == http.StatusUnauthorized:
		return ErrUnauthorized
	case status == http.StatusPaymentRequired:
		return ErrQuotaExceeded
	case status == http.StatusForbidden:
		return ErrForbidden
	case status == http.StatusNotFound:
		return survey.ErrNotFound
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status >= 500:
		return ErrServer
	case status >= 400:
		return ErrBadRequest
	}
	return ErrMalformed // 1xx/3xx: the client follows no redirects
}

// IsPermanent reports whether err will not go away by asking again: 400,
// 403, 404, 405 and other 4xx, malformed bodies, invalid arguments, and
// ErrUncertain (the outcome of a sent POST is unknown: retrying blindly may
// create a duplicate, so treat it as final and report it). It is false for
// nil, 401 and 402 (they recover by themselves: the client pauses), 429,
// 5xx, network errors and context errors.
//
// Every error permanent.Is reports (the client marks each ErrMalformed
// with a reason: "decode", "bad_date", "bad_guid", "too_large") is
// permanent here too; the converse does not hold: a 404 or 403 is not
// marked, since a caller must tell "removed" or "forbidden" from "the
// service sent data the client cannot use".
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if permanent.Is(err) {
		return true
	}
	if errors.Is(err, ErrUncertain) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrInvalidArgument) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch s := ae.Status; {
		case s == http.StatusUnauthorized, s == http.StatusPaymentRequired,
			s == http.StatusTooManyRequests, s >= 500:
			return false
		case s >= 400:
			return true
		}
		return true
	}
	return false
}

// callError is a failure that is not an HTTP status: network, timeout,
// malformed body, uncertain POST, refused while unauthorized. Its text names
// the operation and, when known, the request id.
type callError struct {
	op        string
	requestID string
	kind      error // one of the sentinels
	extra     error // a second sentinel matched (e.g. ErrNetwork for ErrTimeout), may be nil
	msg       string
	cause     error // may be nil
}

func (e *callError) Error() string {
	var b strings.Builder
	b.WriteString("surveyapi: ")
	b.WriteString(e.op)
	b.WriteString(": ")
	b.WriteString(e.kind.Error())
	if e.requestID != "" {
		b.WriteString(" (request id ")
		b.WriteString(e.requestID)
		b.WriteString(")")
	}
	if e.msg != "" {
		b.WriteString(": ")
		b.WriteString(e.msg)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

func (e *callError) Unwrap() []error {
	errs := []error{e.kind}
	if e.extra != nil {
		errs = append(errs, e.extra)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// malformed is the error of an answer the client cannot use: it matches
// ErrMalformed and is marked permanent (package internal/permanent) with
// reason. subject names what was asked for (e.g. "survey 4574 response
// da45…"), so that a reject record says which response was bad.
func malformed(op, subject string, status int, requestID, reason, msg string) error {
	if subject != "" {
		msg = subject + ": " + msg
	}
	if status != 0 {
		msg = fmt.Sprintf("HTTP %d: %s", status, msg)
	}
	return permanent.New(reason, &callError{op: op, requestID: requestID, kind: ErrMalformed, msg: msg})
}
