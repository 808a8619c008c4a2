package daemon

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/surveysync/surveysync/config"
)

// The admin token (docs/operations.md, "The admin token"): the admin
// endpoints of the metrics listener (POST /admin/resync) answer only
// requests that carry it, whatever their source address — a same-host
// proxy or sidecar makes remote callers look local, and the listener may be
// bound to 0.0.0.0 (Kubernetes). The daemon creates it at start, 32 random
// bytes in hex, in a 0600 file under the data directory (parquet.dir, with
// ClickHouse too: it also holds the files spool); the commands that call
// the endpoints (surveysync resync) read it from there, so they must run as
// the daemon's user with its configuration. An existing valid file is kept:
// daemons sharing one data directory (ha on one host) share the token, and
// it survives restarts. Delete the file and restart to rotate it.

// AdminTokenFile is the token's file name under parquet.dir.
const AdminTokenFile = "admin.token"

// adminTokenLen is the length of a token: 32 random bytes in hex.
const adminTokenLen = 64

// AdminTokenPath is where the daemon with configuration cfg keeps its admin
// token.
func AdminTokenPath(cfg *config.Config) string {
	dir, err := filepath.Abs(cfg.Parquet.Dir)
	if err != nil {
		dir = cfg.Parquet.Dir
	}
	return filepath.Join(dir, AdminTokenFile)
}

// ensureAdminToken returns the token of path, creating it when missing. A
// file that is not a token (damaged), or that group or others may read (it
// may have leaked), is replaced by a new one with a warning.
func ensureAdminToken(path string, log *slog.Logger) (string, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok, err := readAdminToken(path)
	var bad *badTokenFileError
	replace := false
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, fs.ErrNotExist):
	case errors.As(err, &bad):
		replace = true
		log.Warn("admin token file replaced by a new token: "+bad.why, "file", path)
	default:
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	tok, tmp, err := writeTokenTemp(dir)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if replace {
		if err := os.Rename(tmp, path); err != nil {
			return "", fmt.Errorf("admin token: %w", err)
		}
		return tok, syncDir(dir)
	}
	// Link, not rename: a daemon starting at the same moment on the same
	// directory may have written one already; then both use that one.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readAdminToken(path)
		}
		return "", fmt.Errorf("admin token: %w", err)
	}
	return tok, syncDir(dir)
}

// writeTokenTemp writes a new random token to a 0600 temporary file of dir.
func writeTokenTemp(dir string) (tok, tmp string, err error) {
	b := make([]byte, adminTokenLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	tok = hex.EncodeToString(b)
	f, err := os.CreateTemp(dir, "."+AdminTokenFile+"-*") // 0600
	if err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	return tok, f.Name(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	return nil
}

// badTokenFileError is a token file the daemon replaces.
type badTokenFileError struct{ path, why string }

func (e *badTokenFileError) Error() string { return "admin token " + e.path + ": " + e.why }

// readAdminToken reads and checks the token file at path.
func readAdminToken(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", &badTokenFileError{path, "not a regular file"}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", &badTokenFileError{path, fmt.Sprintf("group or others may access it (mode %04o)", fi.Mode().Perm())}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) != adminTokenLen || strings.Trim(tok, "0123456789abcdef") != "" {
		return "", &badTokenFileError{path, "it does not hold a token (64 hex digits)"}
	}
	return tok, nil
}

// AdminToken reads the running daemon's admin token for a command that
// calls its admin endpoints; the error says what to do.
func AdminToken(cfg *config.Config) (string, error) {
	path := AdminTokenPath(cfg)
	tok, err := readAdminToken(path)
	var bad *badTokenFileError
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("the admin token %s does not exist: the daemon writes it when it starts with metrics.listen on; give this command the daemon's configuration (parquet.dir)", path)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("the admin token %s cannot be read (%w): run this command as the daemon's user", path, err)
	case errors.As(err, &bad):
		return "", fmt.Errorf("%w: restart the daemon, which writes a new one (or delete the file first)", err)
	}
	return "", fmt.Errorf("the admin token: %w", err)
}

// adminAuthorized checks r's "Authorization: Bearer <token>" against token
// in constant time; a refusal is answered (401 without a token, 403 with a
// wrong one) and false returned.
func adminAuthorized(w http.ResponseWriter, r *http.Request, token, path string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || got == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="surveysync admin"`)
		http.Error(w, "admin endpoints need the daemon's admin token (Authorization: Bearer, from "+path+"); surveysync resync reads it", http.StatusUnauthorized)
		return false
	}
	// Hashes of equal length: the comparison time says nothing about the
	// token's length either.
	g, want := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	if token == "" || subtle.ConstantTimeCompare(g[:], want[:]) != 1 {
		http.Error(w, "wrong admin token (see "+path+")", http.StatusForbidden)
		return false
	}
	return true
}
