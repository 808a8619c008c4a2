package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

// runBinary runs the binary with args and returns its exit code and output.
func runBinary(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("surveysync %v: %v\n%s", args, err, tail(string(out), 40))
	return -1, ""
}

// damagedStateConfig writes the configuration of a data folder under base:
// Parquet output, uploaded files copied to base/files, a csv_dir feed.
func damagedStateConfig(t *testing.T, e *emulator, base string) string {
	t.Helper()
	cfg := fmt.Sprintf(`api:
  base_url: %s/v1
  token: %s
  user_agent: "surveysync-e2e (e2e@example.invalid)"
  max_concurrency: 32
  rate_limit: 100000
  max_retries: 10
surveys: [%s]
parquet:
  dir: %s/data
metrics:
  listen: ""
sync:
  poll_interval: 1s
  settle_lag: 0s
files:
  url: file://%s/files
feeds:
  - name: crm
    type: csv_dir
    distribution_id: 1001
    interval: 1s
    mapping: {email: email}
    csv_dir: {dir: %s/feed}
`, e.srv.URL, tokenOf(e), joinIDs(e.ids), base, base, base)
	path := filepath.Join(base, "surveysync.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var damagesE2E = []struct {
	name string
	fn   func([]byte) []byte
}{
	// Half of what is written: a bbolt file is grown ahead with zeros.
	{"cut in half", func(b []byte) []byte { return b[:len(bytes.TrimRight(b, "\x00"))/2] }},
	{"noise in the middle", func(b []byte) []byte {
		b = append([]byte(nil), b...)
		for i := len(b) / 3; i < len(b)*2/3; i++ {
			b[i] = byte(i*7919 + 13)
		}
		return b
	}},
	{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }},
}

// Every file surveysync reads at start (but the webhook spool), damaged
// three ways, through the binary: the daemon either moves it aside with a
// warning naming it and goes on (exit 0, the output exact), or refuses
// with an error naming it and the fix (exit 1, no panic), and the fix
// named makes the next start work (docs/operations.md, "Damaged local
// state").
func TestDamagedLocalStateRecoversOrRefuses(t *testing.T) {
	const withFiles, withReject = 100, 101
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: withFiles, Responses: 30, Seed: 5, Files: true}, {ID: withReject, Responses: 30, Seed: 6}}})
	var bad, erased string
	for r := range e.sim.Responses(withReject) {
		if r.ResponseStatus == survey.StatusCompleted {
			bad = string(r.ResponseID)
			break
		}
	}
	for r := range e.sim.Responses(withFiles) {
		if r.ResponseStatus == survey.StatusCompleted {
			erased = string(r.ResponseID)
			break
		}
	}
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultInvalidDate, Survey: withReject, Response: bad}); err != nil {
		t.Fatal(err)
	}

	// The template: a sync (state, privacy record, rejects, file index), a
	// feed run (the ledger), an erasure (the erasures log).
	tmpl := t.TempDir()
	cfg := damagedStateConfig(t, e, tmpl)
	if err := os.MkdirAll(filepath.Join(tmpl, "feed"), 0o700); err != nil {
		t.Fatal(err)
	}
	if code, out := runBinary(t, 2*time.Minute, "run", "--config", cfg, "--exit-when-synced"); code != 0 {
		t.Fatalf("first sync: exit %d\n%s", code, tail(out, 40))
	}
	if err := os.WriteFile(filepath.Join(tmpl, "feed", "a.csv"), []byte("email\nann@example.com\nbob@example.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := runBinary(t, time.Minute, "feed", "run", "crm", "--config", cfg); code != 0 {
		t.Fatalf("feed run: exit %d\n%s", code, out)
	}
	eraseArgs := []string{"erase", "--survey", fmt.Sprint(withFiles), "--response", erased}
	if code, out := runBinary(t, time.Minute, append(eraseArgs, "--config", cfg)...); code != 0 {
		t.Fatalf("erase: exit %d\n%s", code, out)
	}
	rejects, _ := filepath.Glob(filepath.Join(tmpl, "data", "rejects", "*.jsonl"))
	if len(rejects) != 1 {
		t.Fatalf("rejects files: %v", rejects)
	}
	// A download a killed daemon left in the files spool (it may hold an
	// upload of a response erased since): every start removes it.
	if err := os.WriteFile(filepath.Join(tmpl, "data", "_files_spool", "surveysync-file-1.part"), []byte("an upload cut short"), 0o600); err != nil {
		t.Fatal(err)
	}
	current := func(dir string) int {
		cur, err := parquet.ReadCurrent(context.Background(), filepath.Join(dir, "data"), 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range cur.Responses {
			if !r.Deleted {
				n++
			}
		}
		return n
	}
	want := current(tmpl)

	type fixFunc func(t *testing.T, cfg, path, out string)
	mv := func(t *testing.T, _, path, _ string) {
		if err := os.Rename(path, path+".damaged"); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		file   string   // under the data folder
		refuse []string // the refusal names these (besides the file); nil: recovered
		fix    fixFunc
	}{
		{file: "_state/sync_state.json"},
		{file: "_state/surveys.json"},
		{file: "rejects/" + filepath.Base(rejects[0])},
		{file: ".surveysync.lock"},
		{file: "_state/privacy.json", refuse: []string{"privacy apply", "--all"}, fix: func(t *testing.T, cfg, _, _ string) {
			if code, out := runBinary(t, time.Minute, "privacy", "apply", "--all", "--config", cfg); code != 0 {
				t.Fatalf("privacy apply --all: exit %d\n%s", code, out)
			}
		}},
		{file: "_state/erasures.jsonl", refuse: []string{"erasures log", "tombstones", "surveysync erase"}, fix: func(t *testing.T, cfg, path, out string) {
			m := regexp.MustCompile(`truncate -s (\d+) (\S+) && rm -f (\S+)\)`).FindStringSubmatch(out)
			if m == nil || m[2] != path {
				t.Fatalf("no truncate command for %s in:\n%s", path, out)
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			if err := os.Truncate(path, n); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(m[3]); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if code, out := runBinary(t, time.Minute, append(eraseArgs, "--config", cfg)...); code != 0 {
				t.Fatalf("erase again: exit %d\n%s", code, out)
			}
		}},
		{file: "_feeds/ledger.db", refuse: []string{"feed ledger", "Restore it from a backup", "mv "}, fix: mv},
		{file: "uploaded_files.db", refuse: []string{"uploaded-files index", "Restore it from a backup", "mv "}, fix: mv},
	}
	for _, c := range cases {
		for _, d := range damagesE2E {
			t.Run(c.file+"/"+d.name, func(t *testing.T) {
				base := t.TempDir()
				if err := os.CopyFS(base, os.DirFS(tmpl)); err != nil {
					t.Fatal(err)
				}
				cfg := damagedStateConfig(t, e, base)
				path := filepath.Join(base, "data", c.file)
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, d.fn(raw), 0o600); err != nil {
					t.Fatal(err)
				}
				// doctor says so first, changing nothing.
				dcode, dout := runBinary(t, time.Minute, "doctor", "--config", cfg)
				switch {
				case c.refuse != nil && (dcode != 1 || !strings.Contains(dout, "FAIL  local file "+path)):
					t.Errorf("doctor: exit %d, want a FAIL naming %s:\n%s", dcode, path, dout)
				case c.refuse == nil && c.file != ".surveysync.lock" && !strings.Contains(dout, "info  local file "+path+" is damaged"):
					t.Errorf("doctor: no line naming %s:\n%s", path, dout)
				}
				code, out := runBinary(t, 2*time.Minute, "run", "--config", cfg, "--exit-when-synced")
				if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
					t.Fatalf("a panic:\n%s", tail(out, 40))
				}
				if c.refuse == nil {
					if code != 0 {
						t.Fatalf("exit %d, want 0 (recovered):\n%s", code, tail(out, 30))
					}
					if c.file != ".surveysync.lock" {
						if !strings.Contains(out, "a local file is damaged") || !strings.Contains(out, path) || !strings.Contains(out, "lost=") {
							t.Errorf("no warning naming %s and what is lost:\n%s", path, tail(out, 30))
						}
						if aside, _ := filepath.Glob(path + ".damaged-*"); len(aside) != 1 {
							t.Errorf("moved aside: %v", aside)
						}
					}
					if left, _ := filepath.Glob(filepath.Join(base, "data", "_files_spool", "*.part")); len(left) != 0 {
						t.Errorf("a former download is left: %v", left)
					}
					if n := current(base); n != want {
						t.Errorf("%d responses in the output, want %d", n, want)
					}
					return
				}
				if code != 1 {
					t.Fatalf("exit %d, want 1 (refused):\n%s", code, tail(out, 30))
				}
				t.Logf("refused: %s", strings.TrimSpace(tail(out, 2)))
				for _, w := range append([]string{path}, c.refuse...) {
					if !strings.Contains(out, w) {
						t.Errorf("the refusal lacks %q:\n%s", w, tail(out, 10))
					}
				}
				c.fix(t, cfg, path, out)
				if dcode, dout := runBinary(t, time.Minute, "doctor", "--config", cfg); dcode != 0 || !strings.Contains(dout, "ok    local state under ") {
					t.Errorf("doctor after the fix: exit %d\n%s", dcode, dout)
				}
				if code, out := runBinary(t, 2*time.Minute, "run", "--config", cfg, "--exit-when-synced"); code != 0 {
					t.Fatalf("after the fix: exit %d\n%s", code, tail(out, 30))
				}
			})
		}
	}
}
