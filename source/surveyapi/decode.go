package surveyapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

// meta is the envelope's metadata in every spelling the service uses.
type meta struct {
	RequestID      string          `json:"requestId"`
	RequestIDSnake string          `json:"request_id"`
	HTTPStatus     json.RawMessage `json:"http_status"` // kept raw: only logged, never trusted over the HTTP status
	StatusCode     json.RawMessage `json:"status_code"`
	Errors         []errorItem     `json:"errors"`
	Message        string          `json:"message"`
}

func (m *meta) requestID() string {
	if m.RequestID != "" {
		return m.RequestID
	}
	return m.RequestIDSnake
}

type errorItem struct {
	ErrorMessage string `json:"error_message"`
	Message      string `json:"message"`
	Field        string `json:"field"`
}

// envelope is the success body: meta and the typed result, decoded in one
// pass straight into T (no intermediate json.RawMessage copy).
type envelope[T any] struct {
	Meta   meta `json:"meta"`
	Result *T   `json:"result"`
}

// errorEnvelope is the error body: {"meta": {"requestId": …, "errors": [{"error_message": …}]}}.
// Top-level message/error fields are accepted too (proxies and older samples).
type errorEnvelope struct {
	Meta    meta            `json:"meta"`
	Message string          `json:"message"`
	Error   json.RawMessage `json:"error"`
	Errors  []errorItem     `json:"errors"`
}

// decodeResult decodes a success body into T in one pass (envelope and
// typed result, no json.RawMessage round trip). optional allows a missing
// or null result (ops that may return nothing). The request id is returned
// whenever the meta could be read, also with an error. Errors are marked
// permanent with their reason (badBody); do turns them into ErrMalformed.
func decodeResult[T any](headerReqID string, body []byte, contentType string, optional bool) (*T, string, error) {
	var env envelope[T]
	if err := json.Unmarshal(body, &env); err != nil {
		reqID := headerReqID
		// The envelope may be fine but result of the wrong shape: recover the id.
		var m struct {
			Meta meta `json:"meta"`
		}
		if json.Unmarshal(body, &m) == nil && m.Meta.requestID() != "" {
			reqID = m.Meta.requestID()
		}
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !json.Valid(body) {
			return nil, reqID, badBody("decode", "body is not JSON (Content-Type %q): %s", contentType, snippet(body))
		}
		reason := "decode"
		switch {
		case errors.Is(err, survey.ErrBadTime):
			reason = "bad_date"
		case errors.Is(err, survey.ErrBadGUID):
			reason = "bad_guid"
		}
		return nil, reqID, badBody(reason, "cannot decode result: %v", err)
	}
	reqID := env.Meta.requestID()
	if reqID == "" {
		reqID = headerReqID
	}
	if env.Result == nil {
		if optional {
			return new(T), reqID, nil
		}
		return nil, reqID, badBody("decode", "the envelope has no result")
	}
	return env.Result, reqID, nil
}

// badBody is a permanent error with reason about a body the client cannot use.
func badBody(reason, format string, args ...any) error {
	return permanent.New(reason, fmt.Errorf(format, args...))
}

// decodeError turns an error body into the request id and the service's
// message. A body that is not the JSON error shape yields a snippet.
func decodeError(body []byte, contentType string) (requestID, message string) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", ""
	}
	var e errorEnvelope
	if err := json.Unmarshal(body, &e); err != nil {
		return "", fmt.Sprintf("non-JSON body (Content-Type %q): %s", contentType, snippet(body))
	}
	var msgs []string
	for _, items := range [][]errorItem{e.Meta.Errors, e.Errors} {
		for _, it := range items {
			m := it.ErrorMessage
			if m == "" {
				m = it.Message
			}
			if it.Field != "" {
				m = it.Field + ": " + m
			}
			if m != "" {
				msgs = append(msgs, m)
			}
		}
	}
	for _, m := range []string{e.Meta.Message, e.Message} {
		if m != "" {
			msgs = append(msgs, m)
		}
	}
	if len(e.Error) > 0 && len(msgs) == 0 {
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			msgs = append(msgs, s)
		} else {
			msgs = append(msgs, snippet(e.Error))
		}
	}
	return e.Meta.requestID(), strings.Join(msgs, "; ")
}

// snippet renders the start of a body for an error message: at most 120
// bytes, valid UTF-8, control characters as spaces.
func snippet(b []byte) string {
	const n = 120
	b = bytes.TrimSpace(b)
	cut := len(b) > n
	if cut {
		b = b[:n]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, string(b))
	if cut {
		s += "…"
	}
	return s
}

// Validation of decoded results: the fields without which a result is useless.

func checkResponse(r *survey.Response, want survey.GUID) error {
	if r.ResponseID == "" {
		return badBody("decode", "response detail without response_id")
	}
	if want != "" && r.ResponseID != want {
		return badBody("decode", "response detail for %s, asked for %s", r.ResponseID, want)
	}
	if r.ResponseStatus == "" {
		return badBody("decode", "response detail without response_status")
	}
	return nil
}

func checkList(l *survey.ResponseList) error {
	for i, ref := range l.Data {
		if ref.ResponseID == "" {
			return badBody("decode", "data[%d] without response_id", i)
		}
	}
	// Only compared, never used to size anything: a hostile total or
	// per_page (10^9, 10^18) costs nothing, and the arithmetic cannot overflow.
	if l.Data == nil && l.Total > 0 && (l.Page <= 1 || l.PerPage <= 0 || l.Page-1 <= (l.Total-1)/l.PerPage) {
		return badBody("decode", "no data although total is %d", l.Total)
	}
	return nil
}

func checkCreated(c *survey.CreatedContact) error {
	if c.ID == 0 {
		return badBody("decode", "created contact without id")
	}
	return nil
}
