package surveyapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/surveysync/surveysync/pipeline/survey"
)

const (
	// maxJSONBody bounds a success body read into memory (a 1000-item list
	// page is ~150 KB; a large response detail a few MB).
	maxJSONBody = 64 << 20
	// maxErrorBody bounds an error body: only the message is kept.
	maxErrorBody = 64 << 10
	// maxPooledBuffer: bigger buffers are dropped rather than kept in the pool.
	maxPooledBuffer = 4 << 20
)

// bodyBuf is a pooled body buffer. A body is read whole into one (sized from
// Content-Length when sent), decoded in one pass, and the buffer goes back:
// nothing decoded points into it.
type bodyBuf struct{ b []byte }

func (b *bodyBuf) Bytes() []byte { return b.b }

var bufPool = sync.Pool{New: func() any { return &bodyBuf{b: make([]byte, 0, 16<<10)} }}

func getBuf() *bodyBuf { return bufPool.Get().(*bodyBuf) }

func putBuf(b *bodyBuf) {
	if b == nil || cap(b.b) > maxPooledBuffer {
		return
	}
	b.b = b.b[:0]
	bufPool.Put(b)
}

var errBodyTooLarge = errors.New("body too large")

// readBody reads r into buf, at most limit bytes, growing buf once to
// sizeHint when the length is known.
func readBody(buf *bodyBuf, r io.Reader, sizeHint int64, limit int) error {
	b := buf.b[:0]
	if sizeHint > 0 && sizeHint < int64(limit) && int(sizeHint)+1 > cap(b) {
		b = make([]byte, 0, int(sizeHint)+1) // +1: the Read that sees EOF needs no growth
	}
	defer func() { buf.b = b }()
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow (amortised doubling)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return errBodyTooLarge
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

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

// decodeResult decodes a success body into T. optional allows a missing or
// null result (ops that may return nothing). The request id is returned
// whenever the meta could be read, also with an error.
func decodeResult[T any](op string, status int, headerReqID string, body []byte, contentType string, optional bool) (*T, string, error) {
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
			return nil, reqID, malformed(op, status, reqID, "body is not JSON (Content-Type %q): %s", contentType, snippet(body))
		}
		return nil, reqID, malformed(op, status, reqID, "cannot decode result: %v", err)
	}
	reqID := env.Meta.requestID()
	if reqID == "" {
		reqID = headerReqID
	}
	if env.Result == nil {
		if optional {
			return new(T), reqID, nil
		}
		return nil, reqID, malformed(op, status, reqID, "the envelope has no result")
	}
	return env.Result, reqID, nil
}

// decodeFast is decodeResult with a fast path (fastjson.go) tried first;
// the fast path only accepts what encoding/json decodes identically.
func decodeFast[T any](op string, status int, headerReqID string, body []byte, contentType string,
	fast func([]byte) (*T, string, bool)) (*T, string, error) {
	if v, reqID, ok := fast(body); ok {
		if reqID == "" {
			reqID = headerReqID
		}
		if v == nil {
			return nil, reqID, malformed(op, status, reqID, "the envelope has no result")
		}
		return v, reqID, nil
	}
	return decodeResult[T](op, status, headerReqID, body, contentType, false)
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
		return errors.New("response detail without response_id")
	}
	if want != "" && r.ResponseID != want {
		return fmt.Errorf("response detail for %s, asked for %s", r.ResponseID, want)
	}
	if r.ResponseStatus == "" {
		return errors.New("response detail without response_status")
	}
	return nil
}

func checkList(l *survey.ResponseList) error {
	for i, ref := range l.Data {
		if ref.ResponseID == "" {
			return fmt.Errorf("data[%d] without response_id", i)
		}
	}
	if l.Data == nil && l.Total > 0 && (l.Page-1)*l.PerPage < l.Total {
		return fmt.Errorf("no data although total is %d", l.Total)
	}
	return nil
}

func checkCreated(c *survey.CreatedContact) error {
	if c.ID == 0 {
		return errors.New("created contact without id")
	}
	return nil
}
