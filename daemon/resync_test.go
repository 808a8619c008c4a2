package daemon

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/surveysync/surveysync/config"
)

// The admin endpoint answers requests with the admin token only, whatever
// their source: a loopback request without it (a same-host proxy) is
// refused as a remote one is.
func TestResyncEndpointRefusesOthers(t *testing.T) {
	d := &parts{log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	d.serveResync(mux, token, "/var/lib/surveysync/admin.token")
	for _, tc := range []struct {
		remote, auth string
		want         int
	}{
		{"10.1.2.3:4567", "", http.StatusUnauthorized},
		{"127.0.0.1:4567", "", http.StatusUnauthorized},
		{"[::1]:4567", "Bearer ", http.StatusUnauthorized},
		{"127.0.0.1:4567", "Basic " + token, http.StatusUnauthorized},
		{"127.0.0.1:4567", "Bearer " + token[:63], http.StatusForbidden},
		{"127.0.0.1:4567", "Bearer " + token + "0", http.StatusForbidden},
		{"127.0.0.1:4567", "Bearer " + strings.ToUpper(token), http.StatusForbidden},
		{"127.0.0.1:4567", "Bearer " + token, http.StatusBadRequest}, // no survey id: past the gate
		{"10.1.2.3:4567", "Bearer " + token, http.StatusBadRequest},  // the token, not the source, decides
	} {
		r := httptest.NewRequest(http.MethodPost, ResyncPath, nil)
		r.RemoteAddr = tc.remote
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s, %q: %d, want %d", tc.remote, tc.auth, w.Code, tc.want)
		}
		if strings.Contains(w.Body.String(), token) {
			t.Errorf("the answer shows the token: %s", w.Body.String())
		}
	}
}

// The daemon creates a 0600 token file in a 0700 data directory, keeps a
// valid one across starts (daemons sharing the directory share it), and
// replaces a damaged or group-readable one; the command's reader names the
// file and the fix.
func TestAdminTokenFile(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, AdminTokenFile)
	tok, err := ensureAdminToken(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Fatalf("token %q", tok)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
	}
	again, err := ensureAdminToken(path, log)
	if err != nil || again != tok {
		t.Fatalf("second start: %q, %v; want the same token", again, err)
	}

	// Concurrent first starts on one directory agree on one token.
	dir2 := filepath.Join(t.TempDir(), "shared")
	var wg sync.WaitGroup
	toks := make([]string, 8)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			toks[i], _ = ensureAdminToken(filepath.Join(dir2, AdminTokenFile), log)
		}()
	}
	wg.Wait()
	for _, x := range toks {
		if x == "" || x != toks[0] {
			t.Fatalf("concurrent starts got tokens %q", toks)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir2, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// A group-readable file may have leaked: replaced.
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := AdminToken(cfgWithDir(dir)); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mode 0640") {
		t.Errorf("reading a group-readable token: %v", err)
	}
	fresh, err := ensureAdminToken(path, log)
	if err != nil || fresh == tok {
		t.Fatalf("group-readable token file: %q, %v; want a new token", fresh, err)
	}
	// Damaged: replaced.
	if err := os.WriteFile(path, []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fixed, err := ensureAdminToken(path, log); err != nil || len(fixed) != 64 || fixed == fresh {
		t.Fatalf("damaged token file: %q, %v", fixed, err)
	}
	got, err := AdminToken(cfgWithDir(dir))
	if err != nil || len(got) != 64 {
		t.Fatalf("AdminToken: %q, %v", got, err)
	}
	// Missing: the command says who writes it.
	if _, err := AdminToken(cfgWithDir(t.TempDir())); err == nil || !strings.Contains(err.Error(), "does not exist: the daemon writes it") {
		t.Errorf("no token file: %v", err)
	}
}

func cfgWithDir(dir string) *config.Config {
	c := config.Default()
	c.Parquet.Dir = dir
	return c
}
