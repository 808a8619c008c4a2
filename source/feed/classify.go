package feed

import (
	"context"
	"errors"

	"github.com/surveysync/surveysync/source/surveyapi"
)

// classify maps an API error to a ledger state. Only an answer that proves
// the contact was not created makes a row failed (pushed again by a later
// batch); anything that leaves the outcome open makes it uncertain, so that
// no row is ever created twice:
//
//   - an *surveyapi.APIError (the service answered 4xx, or a final 429/5xx
//     after the client's retries): failed, with the service's message;
//   - surveyapi.ErrUncertain (the POST was sent, then the answer was lost),
//     surveyapi.ErrMalformed (an answer we could not read, possibly a 201):
//     uncertain;
//   - a network error the client reports as not sent, an argument refused
//     before sending, or a context that ended before the call: failed;
//   - anything else: uncertain.
func classify(err error) (state, msg string) {
	msg = err.Error()
	var ae *surveyapi.APIError
	switch {
	case errors.Is(err, surveyapi.ErrUncertain), errors.Is(err, surveyapi.ErrMalformed):
		return StateUncertain, msg
	case errors.As(err, &ae):
		return StateFailed, msg
	case errors.Is(err, surveyapi.ErrNetwork), errors.Is(err, surveyapi.ErrInvalidArgument),
		errors.Is(err, surveyapi.ErrUnauthorized), errors.Is(err, surveyapi.ErrQuotaExceeded):
		return StateFailed, msg
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client reports a context that ended after the request was
		// sent as ErrUncertain (matched above); a bare context error means
		// it was never sent.
		return StateFailed, msg
	}
	return StateUncertain, msg
}
