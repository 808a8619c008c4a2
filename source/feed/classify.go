package feed

import (
	"context"
	"errors"

	"github.com/surveysync/surveysync/source/surveyapi"
)

// classifyCall maps an API error to a ledger state. Only an answer that proves
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
//
// classifyCall also reports whether the failure is about
// the service or the connection rather than the row (401, 402, a final 429
// or 5xx, a network error): a chunk in which every row failed that way
// stops its batch, which is then retried as a whole later (a csv_dir file
// stays in processing/) instead of failing every row of it.
func classifyCall(err error) (state, msg string, systemic bool) {
	state, msg = classifyState(err)
	systemic = state == StateFailed && (errors.Is(err, surveyapi.ErrUnauthorized) || errors.Is(err, surveyapi.ErrQuotaExceeded) ||
		errors.Is(err, surveyapi.ErrRateLimited) || errors.Is(err, surveyapi.ErrServer) || errors.Is(err, surveyapi.ErrNetwork))
	return state, msg, systemic
}

func classifyState(err error) (state, msg string) {
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
