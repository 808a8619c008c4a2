package daemon

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The admin endpoint answers loopback requests with its header only.
func TestResyncEndpointRefusesOthers(t *testing.T) {
	d := &parts{log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	d.serveResync(mux)
	for _, tc := range []struct {
		remote string
		header bool
		want   int
	}{
		{"10.1.2.3:4567", true, http.StatusForbidden},
		{"127.0.0.1:4567", false, http.StatusForbidden},
		{"[::1]:4567", false, http.StatusForbidden},
		{"127.0.0.1:4567", true, http.StatusBadRequest}, // no survey id: past the gate
	} {
		r := httptest.NewRequest(http.MethodPost, ResyncPath, nil)
		r.RemoteAddr = tc.remote
		if tc.header {
			r.Header.Set(adminHeader, "1")
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s, header %v: %d, want %d", tc.remote, tc.header, w.Code, tc.want)
		}
	}
}
