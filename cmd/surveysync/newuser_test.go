package main

// Issue 14, "first hour of a new user": every mistake a new user made gets
// a clear answer. Each case runs the CLI in-process and checks the exact
// message it prints.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
)

func TestNewUserMistakes(t *testing.T) {
	e := newEmulator(t, simOptions(1, 5))
	good := writeConfig(t, e, nil, "")

	// A port somebody else holds.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()

	missing := filepath.Join(t.TempDir(), "no-such-folder")
	csvFeed := fmt.Sprintf("feeds:\n  - name: crm\n    type: csv_dir\n    distribution_id: 1\n    mapping: {email: email}\n    csv_dir: {dir: %s}\n", missing)
	httpFeed := fmt.Sprintf("feeds:\n  - name: signups\n    type: csv_dir\n    distribution_id: 1\n    mapping: {email: email}\n    csv_dir: {dir: %s}\n  - name: web\n    type: http\n    distribution_id: 2\n    mapping: {email: email}\n    http: {listen: %q, token: feed-token-0123456789abcdef}\n", t.TempDir(), busyAddr)
	badSurvey := strings.Replace(readFile(t, good), "surveys: [", "surveys: [999, ", 1)
	badSurveyPath := filepath.Join(t.TempDir(), "bad-survey.yaml")
	if err := os.WriteFile(badSurveyPath, []byte(badSurvey), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		env  []string // KEY=VALUE set for the case
		code int
		// stdout/stderr must contain each of these lines (exact lines).
		stdout, stderr []string
		notStdout      []string
	}{
		{name: "unknown flag of run", args: []string{"run", "--bogus"}, code: exitUsage,
			stderr: []string{"surveysync run: unknown flag: --bogus", "Run 'surveysync run --help' for its flags."}},
		{name: "misspelt --config", args: []string{"doctor", "--confg", "x"}, code: exitUsage,
			stderr: []string{"surveysync doctor: unknown flag: --confg (did you mean --config?)", "Run 'surveysync doctor --help' for its flags."}},
		{name: "run --help", args: []string{"run", "--help"}, code: exitOK,
			stdout: []string{"Usage: surveysync run [flags]", "Sync the configured surveys into ClickHouse (or Parquet files), receive webhooks, run the feeds; with no configuration, a demo against the built-in emulator."}},
		{name: "doctor --help has no run-only flags", args: []string{"doctor", "--help"}, code: exitOK,
			stdout:    []string{"Usage: surveysync doctor [flags]"},
			notStdout: []string{"--exit-when-synced"}},
		{name: "status --help has only the sink's flags", args: []string{"status", "-h"}, code: exitOK,
			stdout:    []string{"Usage: surveysync status [flags]"},
			notStdout: []string{"--exit-when-synced", "--webhooks-listen", "--surveys", "--demo"}},
		{name: "feed run --help", args: []string{"feed", "run", "--help"}, code: exitOK,
			stdout: []string{"Usage: surveysync feed run NAME [flags]", "Run one feed once: push what its source holds now, then exit."}},
		{name: "query --help", args: []string{"query", "--help"}, code: exitOK,
			stdout: []string{"Usage: surveysync query [flags]"}},
		{name: "feed run without a name", args: []string{"feed", "run"}, code: exitUsage,
			stderr: []string{"surveysync feed run: missing argument: usage: surveysync feed run NAME"}},
		{name: "single underscore token variable", args: []string{"config", "print"}, env: []string{"SURVEYSYNC_API_TOKEN=abc"}, code: exitConfig,
			stderr: []string{"environment variable SURVEYSYNC_API_TOKEN sets nothing: levels of a key are separated by a double underscore (did you mean SURVEYSYNC_API__TOKEN?)"}},
		{name: "unknown variable is reported", args: []string{"config", "print", "--config", good}, env: []string{"SURVEYSYNC_WHATEVER=1"}, code: exitOK,
			stderr: []string{"surveysync: warning: environment variable SURVEYSYNC_WHATEVER is not a configuration key; ignored (keys are SURVEYSYNC_<SECTION>__<KEY>, e.g. SURVEYSYNC_API__TOKEN)"}},
		{name: "indexed key in --set", args: []string{"config", "print", "--config", writeConfig(t, e, nil, httpFeed), "--set", "feeds[1].http.listen=127.0.0.1:18091"}, code: exitOK,
			stdout: []string{"      listen: 127.0.0.1:18091"}},
		{name: "doctor: a missing csv folder", args: []string{"doctor", "--config", writeConfig(t, e, nil, csvFeed)}, code: exitFail,
			stdout: []string{
				fmt.Sprintf("FAIL  feed crm (feeds[0], csv_dir) folder %s: csv_dir.dir %s does not exist (create it, or point csv_dir.dir at the folder files are dropped into)", missing, missing),
				fmt.Sprintf("      fix: create the folder (mkdir -p %s) or set feeds[0].csv_dir.dir", missing),
				"1 check(s) failed"}},
		{name: "run: a missing csv folder", args: []string{"run", "--config", writeConfig(t, e, nil, csvFeed), "--exit-when-synced"}, code: exitFail,
			stderr: []string{fmt.Sprintf("surveysync run: feed crm (feeds[0]): csv_dir.dir %s does not exist (create it, or point csv_dir.dir at the folder files are dropped into)", missing)}},
		{name: "doctor: a feed's port is taken", args: []string{"doctor", "--config", writeConfig(t, e, nil, httpFeed)}, code: exitFail,
			stdout: []string{"      fix: pick a free address for feeds[1].http.listen or stop what holds the port"}},
		{name: "doctor: a bad survey id", args: []string{"doctor", "--config", badSurveyPath}, code: exitFail,
			stdout: []string{"FAIL  survey 999: not found (HTTP 404)", "ok    survey 100", "1 check(s) failed"}},
		{name: "run --exit-when-synced: a bad survey id", args: []string{"run", "--config", badSurveyPath, "--exit-when-synced"}, code: exitFail,
			stderr: []string{"surveysync run: survey 999: not found (HTTP 404): check the ids in surveys and the token's account"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, kv := range c.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			done := make(chan struct{})
			var code int
			var out, errOut string
			go func() {
				defer close(done)
				code, out, errOut = cli(t, c.args...)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatalf("%v did not return within a minute", c.args)
			}
			if code != c.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errOut)
			}
			for _, want := range c.stdout {
				if !hasLine(out, want) {
					t.Errorf("stdout lacks the line %q:\n%s", want, out)
				}
			}
			for _, want := range c.stderr {
				if !hasLine(errOut, want) {
					t.Errorf("stderr lacks the line %q:\n%s", want, errOut)
				}
			}
			for _, not := range c.notStdout {
				if strings.Contains(out, not) {
					t.Errorf("stdout has %q:\n%s", not, out)
				}
			}
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("the missing feed folder was created (%v)", err)
	}
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// The status table: progress while a cycle runs, "synced" for streams that
// caught up (not now − watermark), and no 1970 lag for a survey never read.
func TestStatusShowsProgressAndSynced(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	epoch := time.Unix(0, 0).UTC()
	states := []pipeline.StreamState{
		// Finished 13 minutes ago after a 12-minute backfill: caught up.
		{SurveyID: 1, Stream: "completed", Watermark: now.Add(-25*time.Minute - 5*time.Second), LastRunAt: now.Add(-25 * time.Minute), Synced: 6000, UpdatedAt: now.Add(-13 * time.Minute)},
		// Backfilling: 1200 of 6000 in 60 s.
		{SurveyID: 2, Stream: "completed", CycleStartedAt: now.Add(-70 * time.Second), CycleListed: 6000, CycleDone: 1200, UpdatedAt: now.Add(-10 * time.Second)},
		// A bad survey id as ClickHouse keeps it (zero times are 1970).
		{SurveyID: 999, Stream: "completed", Watermark: epoch, LastRunAt: now.Add(-time.Minute), LastError: "HTTP 404 Not Found: Survey not found", UpdatedAt: now},
	}
	var b bytes.Buffer
	printStates(&b, states, statusOptions{now: now, settleLag: 5 * time.Second, pollInterval: 30 * time.Second})
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"synced (last run 25m0s ago)",
		"1200/6000 (20%) 20.0/s ETA 4m0s",
		"backfilling",
		"in progress: 1200 of 6000 listed responses done (20%), 20.0/s, about 4m0s left",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	if strings.Contains(out, "no stream has run yet") || strings.Contains(out, "1970") || strings.Contains(out, "h0m") {
		t.Errorf("status shows a bogus line:\n%s", out)
	}
}

func TestSurveysimHelp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "surveysim")
	if out, err := exec.Command("go", "build", "-o", bin, "../surveysim").CombinedOutput(); err != nil {
		t.Fatalf("build surveysim: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--help")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("surveysim --help: %v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "Usage: surveysim [flags]\n") || !strings.Contains(stdout.String(), "--listen") {
		t.Errorf("surveysim --help printed:\n%s", stdout.String())
	}
}
