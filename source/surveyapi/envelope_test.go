package surveyapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/survey"
)

const upperRID = "DA453B67-791E-4D4D-9009-75B1ED8A33C1"

// Every envelope spelling the service is known to send decodes.
func TestEnvelopeVariantsDetail(t *testing.T) {
	cases := map[string]struct {
		body     string
		created  time.Time
		title    string
		value    int64
		total    int64
		hasTotal bool
	}{
		"requestId+http_status, 7 digits": {
			body:    `{"meta": {"requestId": "a1", "http_status": 200}, "result": {"response_id": "` + testRID + `", "survey_id": 4574, "survey_name": "S", "date_created": "2022-09-12T16:24:09.4885133Z", "response_status": "completed", "pages": [{"id": 1, "questions": [{"id": 2, "type": "single", "title": "Q", "answers": [{"choice_id": 3, "value": 5}]}]}]}}`,
			created: time.Date(2022, 9, 12, 16, 24, 9, 488513300, time.UTC), title: "Q", value: 5,
		},
		"request_id+status_code, 0 digits, upper-case guid, no title": {
			body:    `{"result": {"response_id": "` + upperRID + `", "survey_id": 4574, "date_created": "2022-09-12T16:24:09Z", "response_status": "partial", "pages": [{"id": 1, "questions": [{"id": 2, "type": "essay", "answers": [{"text": "ahoj"}]}]}]}, "meta": {"request_id": "a2", "status_code": 200}}`,
			created: time.Date(2022, 9, 12, 16, 24, 9, 0, time.UTC),
		},
		"numbers as text, 3 digits, meta status as text": {
			body:    `{"result": {"response_id": "` + testRID + `", "survey_id": 4574, "date_created": "2022-09-12T16:24:09.123Z", "total_time": "392", "response_status": "completed", "pages": [{"id": 1, "questions": [{"id": 2, "type": "single", "title": "", "answers": [{"choice_id": "3", "row_id": "12", "value": "5"}]}]}]}, "meta": {"requestId": "a3", "http_status": "200"}}`,
			created: time.Date(2022, 9, 12, 16, 24, 9, 123000000, time.UTC), value: 5, total: 392, hasTotal: true,
		},
		"1 digit, unknown fields, no meta": {
			body:    `{"result": {"response_id": "` + testRID + `", "survey_id": 4574, "date_created": "2022-09-12T16:24:09.4Z", "response_status": "deleted", "future_field": {"x": [1]}, "pages": []}, "links": {}}`,
			created: time.Date(2022, 9, 12, 16, 24, 9, 400000000, time.UTC),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, tc.body) })
			h := newClient(t, s.URL, nil)
			r, err := h.c.GetResponse(context.Background(), 4574, survey.GUID(upperRID)) // asked in upper case too
			if err != nil {
				t.Fatal(err)
			}
			if r.ResponseID != testRID {
				t.Errorf("response id = %q, want lower case %q", r.ResponseID, testRID)
			}
			if !r.DateCreated.Equal(tc.created) {
				t.Errorf("date_created = %v, want %v", r.DateCreated, tc.created)
			}
			if len(r.Pages) > 0 {
				q := r.Pages[0].Questions[0]
				if q.Title != tc.title {
					t.Errorf("title = %q", q.Title)
				}
				if tc.value != 0 && (q.Answers[0].Value == nil || int64(*q.Answers[0].Value) != tc.value) {
					t.Errorf("value = %v", q.Answers[0].Value)
				}
			}
			if tc.hasTotal && (r.TotalTime == nil || int64(*r.TotalTime) != tc.total) {
				t.Errorf("total_time = %v", r.TotalTime)
			}
		})
	}
}

func TestEnvelopeVariantsList(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("page") != "2" || q.Get("per_page") != "1000" || q.Get("status") != "partial" ||
			q.Get("start_completed_at") != "2026-11-01T00:00:00Z" || q.Get("end_completed_at") != "2026-11-02T09:30:00.5Z" {
			t.Errorf("query = %s", r.URL.RawQuery)
		}
		writeJSON(w, 200, `{"meta": {"request_id": "l1", "status_code": 200}, "result": {"per_page": 1000, "page": 2, "total": 1002, "data": [{"response_id": "`+upperRID+`", "href": "https://api/x"}, {"response_id": "0b8e6a8c-1d2f-4e3a-9b4c-5d6e7f8a9b0c", "href": "https://api/y"}]}}`)
	})
	h := newClient(t, s.URL, nil)
	l, err := h.c.ListResponses(context.Background(), 4574, survey.ListQuery{
		Page: 2, PerPage: 1000, Status: survey.StatusPartial,
		StartCompletedAt: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		EndCompletedAt:   time.Date(2026, 11, 2, 10, 30, 0, 5e8, time.FixedZone("CET", 3600)).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != 1002 || len(l.Data) != 2 || l.Data[0].ResponseID != testRID {
		t.Errorf("list = %+v", l)
	}
	for _, bad := range []survey.ListQuery{{PerPage: 1001}, {Page: -1}, {Status: "done"}} {
		_, err := h.c.ListResponses(context.Background(), 4574, bad)
		if !errors.Is(err, ErrInvalidArgument) || !IsPermanent(err) {
			t.Errorf("%+v: err = %v", bad, err)
		}
	}
}

func TestEnvelopeVariantsSendAndCreate(t *testing.T) {
	bodies := []struct {
		status int
		body   string
		want   survey.ContactsCount
	}{
		{200, `{"result": {"contacts_count": {"pending": 1250, "sent": 48545, "bounces": 124}}, "meta": {"requestId": "s1", "http_status": 200}}`, survey.ContactsCount{Pending: 1250, Sent: 48545, Bounces: 124}},
		{200, `{"meta": {"requestId": "s2", "http_status": 200}}`, survey.ContactsCount{}},
		{200, `{"result": null, "meta": {"request_id": "s3"}}`, survey.ContactsCount{}},
		{204, ``, survey.ContactsCount{}},
	}
	i := 0
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/contacts") {
			writeJSON(w, 200, `{"result": {"id": 554784, "survey_url": "https://www.click4survey.cz/m4/3177/abc", "created_at": "2022-08-21T11:31:12Z"}, "meta": {"request_id": "c1", "status_code": 200}}`)
			return
		}
		b := bodies[i]
		if b.status == 204 {
			w.WriteHeader(204)
			return
		}
		writeJSON(w, b.status, b.body)
	})
	h := newClient(t, s.URL, nil)
	for i = range bodies {
		res, err := h.c.SendMessage(context.Background(), 7, 9, survey.SendRequest{})
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		if res.ContactsCount != bodies[i].want {
			t.Errorf("body %d: %+v", i, res.ContactsCount)
		}
	}
	cc, err := h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@example.cz"})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ID != 554784 || cc.SurveyURL == "" || cc.CreatedAt.IsZero() {
		t.Errorf("created = %+v", cc)
	}
}

// Really malformed bodies are rejected with an error quoting the op and the
// request id, permanently, without retry.
func TestMalformedBodies(t *testing.T) {
	type call func(c *Client) error
	get := func(c *Client) error { _, err := c.GetResponse(context.Background(), 4574, testRID); return err }
	list := func(c *Client) error {
		_, err := c.ListResponses(context.Background(), 4574, survey.ListQuery{})
		return err
	}
	create := func(c *Client) error {
		_, err := c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@b.cz"})
		return err
	}
	send := func(c *Client) error {
		_, err := c.SendMessage(context.Background(), 7, 9, survey.SendRequest{})
		return err
	}
	cases := []struct {
		name, ctype, body, reqID, op, text string
		call                               call
	}{
		{"plain text", "text/plain", "Internal Server Error", "", OpGetResponse, "not JSON", get},
		{"html page", "text/html", "<!DOCTYPE html><html><head><title>Maintenance</title></head><body>Back soon</body></html>", "", OpGetResponse, "<!DOCTYPE html>", get},
		{"empty", "application/json", "", "", OpGetResponse, "not JSON", get},
		{"truncated", "application/json", `{"result": {"response_id": "` + testRID + `", "pages": [`, "", OpGetResponse, "not JSON", get},
		{"result array", "application/json", `{"result": [1, 2], "meta": {"requestId": "m-arr"}}`, "m-arr", OpGetResponse, "cannot decode result", get},
		{"result string", "application/json", `{"result": "ok", "meta": {"request_id": "m-str"}}`, "m-str", OpListResponses, "cannot decode result", list},
		{"no result", "application/json", `{"meta": {"requestId": "m-none", "http_status": 200}}`, "m-none", OpGetResponse, "no result", get},
		{"detail without response_id", "application/json", `{"result": {"survey_id": 4574, "response_status": "completed"}, "meta": {"requestId": "m-noid"}}`, "m-noid", OpGetResponse, "without response_id", get},
		{"detail of another response", "application/json", `{"result": {"response_id": "` + testFID + `", "response_status": "completed"}, "meta": {"requestId": "m-other"}}`, "m-other", OpGetResponse, "asked for", get},
		{"bad guid", "application/json", `{"result": {"response_id": "not-a-guid", "response_status": "completed"}, "meta": {"requestId": "m-guid"}}`, "m-guid", OpGetResponse, "invalid guid", get},
		{"bad time", "application/json", `{"result": {"response_id": "` + testRID + `", "date_created": "yesterday", "response_status": "completed"}, "meta": {"requestId": "m-time"}}`, "m-time", OpGetResponse, "invalid timestamp", get},
		{"bad number", "application/json", `{"result": {"response_id": "` + testRID + `", "total_time": "five", "response_status": "completed"}, "meta": {"requestId": "m-num"}}`, "m-num", OpGetResponse, "invalid integer", get},
		{"list item without id", "application/json", `{"result": {"page": 1, "per_page": 50, "total": 1, "data": [{"href": "x"}]}, "meta": {"requestId": "m-li"}}`, "m-li", OpListResponses, "data[0] without response_id", list},
		{"list without data", "application/json", `{"result": {"page": 1, "per_page": 50, "total": 3}, "meta": {"requestId": "m-ld"}}`, "m-ld", OpListResponses, "no data", list},
		{"contact without id", "application/json", `{"result": {"survey_url": "x"}, "meta": {"requestId": "m-cc"}}`, "m-cc", OpCreateContact, "without id", create},
		{"send html", "text/html", `<html>oops</html>`, "", OpSendMessage, "not JSON", send},
		{"request id from header", "text/html", `<html>oops</html>`, "hdr-77", OpGetResponse, "not JSON", get},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				if tc.reqID == "hdr-77" {
					w.Header().Set("X-Request-Id", "hdr-77")
				}
				w.WriteHeader(200)
				w.Write([]byte(tc.body))
			})
			h := newClient(t, s.URL, nil)
			err := tc.call(h.c)
			if !errors.Is(err, ErrMalformed) || !IsPermanent(err) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.op) || !strings.Contains(msg, tc.text) {
				t.Errorf("err %q: want op %q and %q", msg, tc.op, tc.text)
			}
			if tc.reqID != "" && !strings.Contains(msg, "request id "+tc.reqID) {
				t.Errorf("err %q does not quote request id %q", msg, tc.reqID)
			}
			if s.hits.Load() != 1 {
				t.Errorf("hits = %d: a malformed body was retried", s.hits.Load())
			}
			if h.c.Count(tc.op, OutcomeMalformed) != 1 {
				t.Errorf("counts = %+v", h.c.Stats().Requests)
			}
		})
	}
}

// Error bodies of every shape keep the service's message and request id.
func TestErrorBodies(t *testing.T) {
	cases := []struct{ body, reqID, msg string }{
		{`{"meta": {"requestId": "e1", "http_status": 400, "errors": [{"error_message": "Invalid email"}, {"error_message": "Phone too long"}]}}`, "e1", "Invalid email; Phone too long"},
		{`{"meta": {"request_id": "e2", "status_code": 400, "errors": [{"field": "email", "message": "required"}]}}`, "e2", "email: required"},
		{`{"message": "Bad things"}`, "", "Bad things"},
		{`{"error": "invalid_request"}`, "", "invalid_request"},
		{`<html><body>400 Bad Request</body></html>`, "", `non-JSON body (Content-Type "text/plain"): <html><body>400 Bad Request</body></html>`},
		{``, "", ""},
	}
	for _, tc := range cases {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(400)
			w.Write([]byte(tc.body))
		})
		h := newClient(t, s.URL, nil)
		_, err := h.c.GetResponse(context.Background(), 4574, testRID)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 {
			t.Fatalf("err = %v", err)
		}
		if ae.RequestID != tc.reqID || ae.Message != tc.msg {
			t.Errorf("body %q: got id %q msg %q", tc.body, ae.RequestID, ae.Message)
		}
	}
}

func TestRealisticResponseDecodes(t *testing.T) {
	body := responseJSON(upperRID)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, string(body)) })
	h := newClient(t, s.URL, nil)
	r, err := h.c.GetResponse(context.Background(), 4574, testRID)
	if err != nil {
		t.Fatal(err)
	}
	if n := countAnswers(r); n != 40 {
		t.Errorf("answers = %d, want 40", n)
	}
	if r.ContactID == nil || *r.ContactID != 4998745 || r.TotalTime == nil || *r.TotalTime != 392 || len(r.URLParameters) != 2 {
		t.Errorf("response = %+v", r)
	}
}
