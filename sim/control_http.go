package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// The control API over HTTP (JSON), under /_sim/. It needs no token: bind
// the stand-alone server to loopback. docs/emulator.md lists the endpoints.

func (s *Sim) controlMux() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /_sim/healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]bool{"ok": true}) })
	m.HandleFunc("GET /_sim/surveys", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Surveys()) })
	m.HandleFunc("POST /_sim/surveys/{sid}/launch", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		var body struct {
			Name string `json:"name"`
		}
		if !readJSON(w, r, &body, true) {
			return
		}
		if err := s.LaunchSurvey(sid, body.Name); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, map[string]any{"survey_id": sid, "launched": true})
	})
	m.HandleFunc("POST /_sim/surveys/{sid}/end", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		if err := s.EndSurvey(sid); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, map[string]any{"survey_id": sid, "ended": true})
	})
	m.HandleFunc("GET /_sim/surveys/{sid}/responses", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
		var b []byte
		for resp := range s.Responses(sid) {
			b = appendResponse(b[:0], &resp, encOpts{})
			b = append(b, '\n')
			if _, err := w.Write(b); err != nil {
				return
			}
		}
	})
	m.HandleFunc("GET /_sim/surveys/{sid}/responses/{rid}", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		resp, found := s.Response(sid, survey.GUID(r.PathValue("rid")))
		if !found {
			writeErr(w, ErrNotFound)
			return
		}
		writeJSON(w, 200, resp)
	})
	m.HandleFunc("POST /_sim/surveys/{sid}/responses", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		var body survey.Response
		if !readJSON(w, r, &body, true) {
			return
		}
		out, err := s.AddResponse(sid, body)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 201, out)
	})
	m.HandleFunc("PUT /_sim/surveys/{sid}/responses/{rid}", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		var body survey.Response
		if !readJSON(w, r, &body, false) {
			return
		}
		body.ResponseID = survey.GUID(r.PathValue("rid"))
		out, err := s.UpdateResponse(sid, body)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, out)
	})
	m.HandleFunc("POST /_sim/surveys/{sid}/responses/{rid}/complete", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		var body struct {
			Status string `json:"status"`
		}
		if !readJSON(w, r, &body, true) {
			return
		}
		out, err := s.CompletePartial(sid, survey.GUID(r.PathValue("rid")), body.Status)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, out)
	})
	m.HandleFunc("DELETE /_sim/surveys/{sid}/responses/{rid}", func(w http.ResponseWriter, r *http.Request) {
		sid, ok := pathInt(w, r, "sid")
		if !ok {
			return
		}
		rid := survey.GUID(r.PathValue("rid"))
		purge := r.URL.Query().Get("purge") == "true"
		var err error
		if purge {
			err = s.PurgeResponse(sid, rid)
		} else {
			err = s.DeleteResponse(sid, rid)
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, 200, map[string]any{"response_id": rid, "deleted": true, "purged": purge})
	})
	m.HandleFunc("GET /_sim/clock", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"now": survey.FormatTime(s.Now())})
	})
	m.HandleFunc("POST /_sim/clock", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Advance string `json:"advance"`
		}
		if !readJSON(w, r, &body, false) {
			return
		}
		d, err := time.ParseDuration(body.Advance)
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": "advance: want a Go duration like \"90m\""})
			return
		}
		s.AdvanceClock(d)
		writeJSON(w, 200, map[string]string{"now": survey.FormatTime(s.Now())})
	})
	m.HandleFunc("GET /_sim/faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Faults()) })
	m.HandleFunc("POST /_sim/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		if !readJSON(w, r, &f, false) {
			return
		}
		if err := s.InjectFault(f); err != nil {
			writeJSON(w, 400, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, 201, f)
	})
	m.HandleFunc("DELETE /_sim/faults", func(w http.ResponseWriter, r *http.Request) {
		s.ClearFaults()
		writeJSON(w, 200, map[string]bool{"cleared": true})
	})
	m.HandleFunc("GET /_sim/contacts", func(w http.ResponseWriter, r *http.Request) {
		did, err := strconv.ParseInt(r.URL.Query().Get("distribution_id"), 10, 64)
		if err != nil {
			writeJSON(w, 400, map[string]string{"error": "distribution_id: want an integer"})
			return
		}
		writeJSON(w, 200, s.Contacts(did))
	})
	m.HandleFunc("GET /_sim/sends", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Sends()) })
	m.HandleFunc("GET /_sim/calls", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Calls()) })
	m.HandleFunc("GET /_sim/webhooks", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"pending": s.WebhooksPending(), "deliveries": s.WebhookDeliveries()})
	})
	m.HandleFunc("/_sim/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]string{"error": "no such control endpoint: " + r.Method + " " + r.URL.Path})
	})
	return m
}

func (s *Sim) serveControl(w http.ResponseWriter, r *http.Request) {
	s.ctlOnce.Do(func() { s.ctl = s.controlMux() })
	s.ctl.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = 500, []byte(`{"error":"encode"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, err error) {
	status := 400
	switch {
	case errors.Is(err, ErrUnknownSurvey), errors.Is(err, ErrNotFound):
		status = 404
	case errors.Is(err, ErrExists), errors.Is(err, ErrState):
		status = 409
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func pathInt(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	v, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": name + ": want an integer"})
		return 0, false
	}
	return v, true
}

func readJSON(w http.ResponseWriter, r *http.Request, v any, emptyOK bool) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err == nil && len(b) == 0 && emptyOK {
		return true
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": "body: " + err.Error()})
		return false
	}
	return true
}
