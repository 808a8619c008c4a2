package feed

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// serverLimits are a feed listener's bounds, passed to its handlers in the
// request's context (Runner.serve sets them; a handler mounted elsewhere
// runs without them).
type serverLimits struct {
	shutdown context.Context // ends when the server shuts down
	slots    chan struct{}   // requests being read and pushed
	wait     time.Duration   // for a slot
	write    time.Duration   // to write an answer
}

type limitsKey struct{}

func limitsOf(r *http.Request) *serverLimits {
	l, _ := r.Context().Value(limitsKey{}).(*serverLimits)
	return l
}

// writeDeadline bounds the writes from now on: set when the handler starts
// and again once the batch is done, so a push that takes minutes is not cut
// while a client that does not read its answer is.
func writeDeadline(w http.ResponseWriter, r *http.Request) {
	if l := limitsOf(r); l != nil {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(l.write))
	}
}

// acquire takes a request slot (after authentication, so that anonymous
// slow clients cannot hold them). It answers 503 itself and returns false
// when none frees within the wait.
func acquire(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	l := limitsOf(r)
	if l == nil {
		return func() {}, true
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, true
	case <-t.C:
		w.Header().Set("Retry-After", "5")
		httpError(w, http.StatusServiceUnavailable, "too many feed requests at once: retry later")
	case <-r.Context().Done():
	}
	return nil, false
}

// HTTPResponse is the answer of an http feed to a POST: one result per
// posted row, in order (Line is the row's index + 1).
type HTTPResponse struct {
	Summary
	Error string      `json:"error,omitempty"`
	Rows  []RowResult `json:"results"`
}

// httpHandler serves one http feed: POST a JSON array of objects (or one
// object) keyed by source column names, with `Authorization: Bearer <token>`. The request is
// answered once every row's outcome is durable in the ledger: 200 with
// per-row results (rows may still be invalid or failed), 400 for a body
// that is not JSON objects (nothing pushed), 401 for a missing
// or wrong token, 413 for a body over MaxBodyBytes, 503 when the batch
// stopped (ledger unavailable, shutting down) — rows reported as pushed
// were pushed, the others may be posted again.
func (f *feed) httpHandler() http.Handler {
	token := []byte("Bearer " + f.opts.HTTP.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeDeadline(w, r)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed, "use POST with a JSON array of contacts")
			return
		}
		auth := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(auth, token) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="surveysync feed"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		release, ok := acquire(w, r)
		if !ok {
			return
		}
		defer release()
		body := http.MaxBytesReader(w, r.Body, f.opts.HTTP.MaxBodyBytes)
		var doc any
		dec := json.NewDecoder(body)
		dec.UseNumber()
		err := dec.Decode(&doc)
		raw, ok := contactsOf(doc)
		if err == nil && !ok {
			err = errors.New("not an array of objects")
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes: split it", mbe.Limit))
				return
			}
			httpError(w, http.StatusBadRequest, "body must be a JSON array of objects (or one object) keyed by source column: "+err.Error())
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			httpError(w, http.StatusBadRequest, "body must hold exactly one JSON array")
			return
		}
		i := 0
		next := func() (sourceRow, error) {
			if i >= len(raw) {
				return sourceRow{}, io.EOF
			}
			i++
			obj, prob := scalarStrings(raw[i-1])
			if prob != nil {
				return sourceRow{line: int64(i), problem: prob}, nil
			}
			return sourceRow{line: int64(i), get: mapGetter(obj)}, nil
		}
		resp := HTTPResponse{Rows: make([]RowResult, 0, len(raw))}
		// The client going away stops reading; the server's shutdown (not
		// the disconnect) starts the grace after which calls are cancelled.
		shutdown := context.WithoutCancel(r.Context()) // mounted elsewhere: calls end by the API timeout
		if l := limitsOf(r); l != nil {
			shutdown = l.shutdown
		}
		sum, err := f.runBatchStop(r.Context(), shutdown, "http:"+newID(f), "", next, func(rr RowResult) {
			resp.Rows = append(resp.Rows, rr)
		}, false)
		resp.Summary = sum
		status := http.StatusOK
		if err != nil {
			status = http.StatusServiceUnavailable
			resp.Error = err.Error()
			f.log.Error("feed: http batch stopped", "feed", f.opts.Name, "err", err)
		}
		// Rows come back in the order of their outcome; put them in input order.
		sortResults(resp.Rows)
		writeDeadline(w, r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(resp) // the client went away: nothing to tell it
	})
}

// contactsOf accepts a JSON array of objects, or one object.
func contactsOf(doc any) ([]map[string]any, bool) {
	switch d := doc.(type) {
	case map[string]any:
		return []map[string]any{d}, true
	case []any:
		out := make([]map[string]any, len(d))
		for i, v := range d {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			out[i] = m
		}
		return out, true
	}
	return nil, false
}

func sortResults(rows []RowResult) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Line < rows[j].Line })
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg}) // the client went away: nothing to tell it
}

// newID returns a batch id part: the time and 6 random bytes.
func newID(f *feed) string {
	var b [6]byte
	rand.Read(b[:])
	return strings.ReplaceAll(f.now().UTC().Format("20060102T150405.000000Z"), ".", "") + "-" + hex.EncodeToString(b[:])
}
