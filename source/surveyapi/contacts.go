package surveyapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/surveysync/surveysync/survey"
)

// CreateContact adds a contact to an email-campaign or CATI distribution
// (docs/api.md §4.1). The service has no idempotency key and no duplicate
// detection, so the call is never repeated once it may have reached the
// service: a timeout or connection reset after the request was written
// returns an error matching ErrUncertain. 429, 5xx answers and connections
// that failed before the request was written are retried.
func (c *Client) CreateContact(ctx context.Context, distributionID int64, ct survey.Contact) (*survey.CreatedContact, error) {
	const op = OpCreateContact
	body, err := json.Marshal(ct)
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, cause: err}
	}
	u := c.base + "/distributions/" + strconv.FormatInt(distributionID, 10) + "/contacts"
	var out *survey.CreatedContact
	subject := "distribution " + strconv.FormatInt(distributionID, 10)
	_, err = c.do(ctx, &request{op: op, method: http.MethodPost, url: u, body: body, post: true, subject: subject}, //nolint:bodyclose // c.do reads and closes every body
		func(_ int, reqID string, b []byte, ctype string) (string, error) {
			cc, id, err := decodeResult[survey.CreatedContact](reqID, b, ctype, false)
			if err != nil {
				return id, err
			}
			if err := checkCreated(cc); err != nil {
				return id, err
			}
			out = cc
			return id, nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SendMessage sends, or schedules, a campaign message to every contact of
// the distribution not yet sent to (docs/api.md §4.2). Retries follow
// CreateContact's rules; the call itself is safe to repeat later (the
// service only sends to contacts not yet sent to). An answer without a
// result is accepted: the counts are then zero.
func (c *Client) SendMessage(ctx context.Context, distributionID, messageID int64, req survey.SendRequest) (*survey.SendResult, error) {
	const op = OpSendMessage
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, cause: err}
	}
	u := c.base + "/distributions/" + strconv.FormatInt(distributionID, 10) +
		"/messages/" + strconv.FormatInt(messageID, 10) + "/send"
	var out *survey.SendResult
	subject := "distribution " + strconv.FormatInt(distributionID, 10) + " message " + strconv.FormatInt(messageID, 10)
	_, err = c.do(ctx, &request{op: op, method: http.MethodPost, url: u, body: body, post: true, subject: subject}, //nolint:bodyclose // c.do reads and closes every body
		func(_ int, reqID string, b []byte, ctype string) (string, error) {
			if len(b) == 0 { // 204 or an empty 200: nothing to report
				out = &survey.SendResult{}
				return reqID, nil
			}
			r, id, err := decodeResult[survey.SendResult](reqID, b, ctype, true)
			if err != nil {
				return id, err
			}
			out = r
			return id, nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}
