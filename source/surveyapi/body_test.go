package surveyapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/survey"
)

// TestPooledBodiesAreNotAliased: body buffers are reused from one request
// to the next, so nothing decoded may point into them. Details of
// different names, fetched concurrently and kept, must keep their names.
func TestPooledBodiesAreNotAliased(t *testing.T) {
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("4c2c2b7e-63a4-4c5a-9b8e-%012d", i)
	}
	body := func(i int) []byte {
		return detailWith(fmt.Sprintf(`{"response_id": %q, "survey_id": 4574, "response_status": "completed",`+
			` "date_created": "2026-11-02T09:14:33Z", "survey_name": "name %d %s", "ip_address": "10.0.0.%d",`+
			` "pages": [{"id": 1, "questions": [{"id": 2, "type": "essay", "title": "t%d", "answers": [{"text": "text %d"}]}]}]}`,
			ids[i], i, strings.Repeat("x", i*50), i, i, i))
	}
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		for i := range ids {
			if ids[i] == id {
				w.Header().Set("Content-Type", "application/json")
				w.Write(body(i))
				return
			}
		}
		http.NotFound(w, r)
	})
	h := newClient(t, s.URL, func(o *Options) { o.MaxConcurrency = 8 })
	got := make([]*survey.Response, len(ids)*5)
	var g errgroup.Group
	for k := range got {
		g.Go(func() error {
			r, err := h.c.GetResponse(context.Background(), 4574, survey.GUID(ids[k%len(ids)]))
			got[k] = r
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for k, r := range got {
		i := k % len(ids)
		if want := fmt.Sprintf("name %d %s", i, strings.Repeat("x", i*50)); r.SurveyName != want ||
			r.IPAddress != fmt.Sprintf("10.0.0.%d", i) || *r.Pages[0].Questions[0].Answers[0].Text != fmt.Sprintf("text %d", i) ||
			r.Pages[0].Questions[0].Title != fmt.Sprintf("t%d", i) {
			t.Fatalf("detail %d changed after later reads: %q %q", i, r.SurveyName, r.IPAddress)
		}
	}
}
