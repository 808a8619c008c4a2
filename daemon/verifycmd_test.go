package daemon

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// POST /admin/reread (surveysync verify --repair) takes the admin token
// only, and refuses a body it cannot use with what is wrong, before it
// reads anything.
func TestRereadEndpointRefusesOthers(t *testing.T) {
	d := &parts{log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	d.serveReread(mux, token, "/var/lib/surveysync/admin.token")
	for _, tc := range []struct {
		auth, body string
		want       int
		says       string
	}{
		{"", `{"survey_id": 1, "responses": []}`, http.StatusUnauthorized, "admin token"},
		{"Bearer " + token[:63], `{"survey_id": 1, "responses": []}`, http.StatusForbidden, ""},
		{"Bearer " + token, `not json`, http.StatusBadRequest, "survey_id"},
		{"Bearer " + token, `{"survey": 1}`, http.StatusBadRequest, "unknown field"},
		{"Bearer " + token, `{"survey_id": 0, "responses": []}`, http.StatusBadRequest, "positive survey id"},
		{"Bearer " + token, `{"survey_id": 1, "responses": [{"id": "nope"}]}`, http.StatusBadRequest, "invalid guid"},
		{"Bearer " + token, `{"survey_id": 1, "responses": [{"id": "da453b67-791e-4d4d-9009-75b1ed8a33c1", "listed_status": "done"}]}`, http.StatusBadRequest, `status "done"`},
	} {
		r := httptest.NewRequest(http.MethodPost, RereadPath, strings.NewReader(tc.body))
		r.RemoteAddr = "127.0.0.1:4567"
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.says) {
			t.Errorf("%q, %s: %d %q, want %d saying %q", tc.auth, tc.body, w.Code, w.Body.String(), tc.want, tc.says)
		}
		if strings.Contains(w.Body.String(), token) {
			t.Errorf("the answer shows the token: %s", w.Body.String())
		}
	}
}
