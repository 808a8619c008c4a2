package webhookrx

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// Handler returns the HTTP handler of the webhook endpoint: POST on
// Options.Path only. It answers 503 until Run has opened the spool and after
// Run stops. It serves no other path (404): mount it at Options.Path, or at
// "/" on its own server.
func (r *Receiver) Handler() http.Handler { return http.HandlerFunc(r.serveHTTP) }

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	s := r.s
	if !s.allowedSource(req.RemoteAddr) {
		r.reply(w, reqForbidden, http.StatusForbidden, "source address not allowed")
		return
	}
	if !s.pathMatches(req.URL.Path) {
		r.reply(w, reqBadPath, http.StatusNotFound, "not found")
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		r.reply(w, reqMethod, http.StatusMethodNotAllowed, "only POST is accepted")
		return
	}
	if !s.basicAuthOK(req) {
		w.Header().Set("WWW-Authenticate", `Basic realm="surveysync webhooks", charset="UTF-8"`)
		r.reply(w, reqUnauthorized, http.StatusUnauthorized, "basic auth required")
		return
	}
	if req.ContentLength > s.MaxBodyBytes {
		r.reply(w, reqTooLarge, http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(s.MaxBodyBytes, 10)+" bytes")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, s.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			r.reply(w, reqTooLarge, http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(s.MaxBodyBytes, 10)+" bytes")
			return
		}
		r.reply(w, reqBadJSON, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	now := s.Now()
	if s.swKey != nil {
		switch err := s.verifySignature(req.Header, body, now); {
		case errors.Is(err, errNoSignature):
			if !s.AllowUnsigned {
				r.reply(w, reqUnauthorized, http.StatusUnauthorized, "Standard Webhooks signature required")
				return
			}
		case err != nil:
			r.reply(w, reqUnauthorized, http.StatusUnauthorized, "signature: "+err.Error())
			return
		}
	}
	parsed, err := parseEvent(body)
	if err != nil {
		r.reply(w, reqBadJSON, http.StatusBadRequest, err.Error())
		return
	}
	id := req.Header.Get("webhook-id")
	if id == "" {
		id = bodyID(body)
	} else if !validID(id) {
		r.reply(w, reqBadJSON, http.StatusBadRequest, "webhook-id must be 1 to 255 printable ASCII characters without spaces")
		return
	}
	if s.Erased != nil && parsed.ResponseID != "" && s.Erased(parsed.SurveyID, parsed.ResponseID) {
		// A response erased: nothing of it is kept (the service need not
		// send it again).
		r.m.event(kindOf(parsed.EventName), evDuplicate)
		r.replyOK(w, reqDuplicate, id)
		return
	}
	if s.Redact != nil {
		body = s.Redact(body)
		if p, err := parseEvent(body); err == nil {
			parsed = p
		} else {
			parsed.ContactID = nil
		}
	}
	ev := &Event{ID: id, ReceivedAt: now.UTC(), Body: body, Parsed: parsed, Name: parsed.EventName}
	kind := ev.Kind()
	switch r.submit(ev) {
	case resAccepted:
		r.m.event(kind, evAccepted)
		r.replyOK(w, reqAccepted, id)
	case resDuplicate:
		r.m.event(kind, evDuplicate)
		r.replyOK(w, reqDuplicate, id)
	case resFull:
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.RetryAfter.Seconds()))))
		r.reply(w, reqSpoolFull, http.StatusServiceUnavailable, "spool full, retry later")
	default:
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.RetryAfter.Seconds()))))
		r.reply(w, reqUnavailable, http.StatusServiceUnavailable, "cannot spool the event now, retry later")
	}
}

// submit hands ev to the spool loop and waits for the commit.
func (r *Receiver) submit(ev *Event) appendResult {
	select {
	case <-r.started:
	default:
		return resError
	}
	q := &appendReq{ev: ev, res: make(chan appendResult, 1)}
	select {
	case r.appendCh <- q:
	case <-r.stopped:
		return resError
	}
	select {
	case res := <-q.res:
		return res
	case <-r.stopped:
		select {
		case res := <-q.res:
			return res
		default:
			return resError
		}
	}
}

func (r *Receiver) replyOK(w http.ResponseWriter, outcome, id string) {
	r.m.requests.WithLabelValues(outcome).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": outcome, "id": id})
}

func (r *Receiver) reply(w http.ResponseWriter, outcome string, status int, msg string) {
	r.m.requests.WithLabelValues(outcome).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
