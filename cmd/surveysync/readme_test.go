package main

// TestREADMEAsANewUser walks README.md as a new user would, through the
// real binary in a fresh folder: the demo and its hint, then the example
// configuration with the README's edits, doctor, run, status and query.
// The API is an emulator the test starts (the README's user has the real
// service); the warehouse is the ClickHouse of
// SURVEYSYNC_TEST_CLICKHOUSE_ADDR when set, else Parquet files.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// userEnv is the environment of the new user's shell: no SURVEYSYNC_
// variable but those given, and ports that cannot clash with other tests.
func userEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SURVEYSYNC_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func runBin(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("surveysync %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

var currentRE = regexp.MustCompile(`current responses \(latest version of each, deleted excluded\): (\d+)`)

func currentCount(t *testing.T, out string) int {
	t.Helper()
	m := currentRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("query printed no count of current responses:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestREADMEAsANewUser(t *testing.T) {
	home := t.TempDir()
	quiet := []string{"SURVEYSYNC_METRICS__LISTEN=127.0.0.1:0"}

	// 1. "Try it": the demo, twice; its hint counts current rows.
	for i := 0; i < 2; i++ {
		code, out, errOut := runBin(t, home, userEnv(quiet...), "run", "--exit-when-synced")
		if code != 0 {
			t.Fatalf("demo run %d: exit %d\n%s\n%s", i+1, code, out, tail(errOut, 30))
		}
		if !strings.Contains(out, "look at it: surveysync query --parquet-dir ./data") {
			t.Fatalf("the demo prints no query hint:\n%s", out)
		}
		code, out, errOut = runBin(t, home, userEnv(), "query", "--parquet-dir", "./data")
		if code != 0 {
			t.Fatalf("query after demo run %d: exit %d\n%s", i+1, code, errOut)
		}
		// The demo: 3 surveys of 1000 responses; a second run adds
		// versions, not responses.
		if n := currentCount(t, out); n != 3000 {
			t.Errorf("after demo run %d, query counts %d current responses, want 3000:\n%s", i+1, n, out)
		}
	}

	// 2. "Against the real service": copy the example, make the README's
	// edits (surveys, clickhouse.addr, the token in the environment).
	e := newEmulator(t, sim.Options{Surveys: specs(2, 400, 14)})
	example, err := os.ReadFile("../../examples/surveysync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(example)
	edit := func(old, new string) {
		t.Helper()
		if !strings.Contains(text, old) {
			t.Fatalf("examples/surveysync.yaml no longer has %q", old)
		}
		text = strings.Replace(text, old, new, 1)
	}
	edit("surveys: [4574, 4575]", "surveys: ["+joinIDs(e.ids)+"]")
	env := userEnv(quiet...)
	env = append(env, "SURVEYSYNC_API__TOKEN="+tokenOf(e),
		// The test's stand-in for the real service, and a faster pace than
		// the example's 10 calls a second.
		"SURVEYSYNC_API__BASE_URL="+e.srv.URL+"/v1", "SURVEYSYNC_API__RATE_LIMIT=200")
	var w *testWarehouse
	if os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR") != "" {
		w = clickhouseOrSkip(t)
		edit("addr: [127.0.0.1:9000]", "addr: ["+w.addr+"]")
		env = append(env, "SURVEYSYNC_CLICKHOUSE__DATABASE="+w.db)
	} else {
		t.Log("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set: the configured run writes Parquet files")
		edit("addr: [127.0.0.1:9000]", "addr: []")
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "surveysync.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	// 3. doctor.
	code, out, errOut := runBin(t, work, env, "doctor", "--config", "surveysync.yaml")
	if code != 0 || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, id := range e.ids {
		if !hasLine(out, "ok    survey "+strconv.FormatInt(id, 10)) {
			t.Errorf("doctor did not check survey %d:\n%s", id, out)
		}
	}

	// 4. run, and status while it runs until every stream is synced.
	d := exec.Command(binPath, "run", "--config", "surveysync.yaml")
	d.Dir = work
	d.Env = env
	dout := lockedBuffer{mu: &sync.Mutex{}, buf: &bytes.Buffer{}}
	d.Stdout, d.Stderr = dout, dout
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if d.ProcessState == nil {
			_ = d.Process.Kill()
			_ = d.Wait()
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	var status string
	for {
		code, out, errOut := runBin(t, work, env, "status", "--config", "surveysync.yaml")
		if code != 0 {
			t.Fatalf("status: exit %d\n%s", code, errOut)
		}
		status = out
		if allSynced(out, len(e.ids)*4) {
			break
		}
		if time.Now().After(deadline) {
			dout.mu.Lock()
			log := dout.buf.String()
			dout.mu.Unlock()
			t.Fatalf("status never showed every stream synced:\n%s\ndaemon:\n%s", status, tail(log, 40))
		}
		time.Sleep(time.Second)
	}
	if regexp.MustCompile(`\d+h\d+m`).MatchString(status) {
		t.Errorf("status shows an hours-long lag for synced streams:\n%s", status)
	}

	// 5. query.
	code, out, errOut = runBin(t, work, env, "query", "--config", "surveysync.yaml")
	if code != 0 {
		t.Fatalf("query: exit %d\n%s\n%s", code, out, errOut)
	}
	want := 0
	for _, id := range e.ids {
		for r := range e.sim.Responses(id) {
			if r.ResponseStatus != survey.StatusDeleted {
				want++
			}
		}
	}
	if got := currentCount(t, out); got != want {
		t.Errorf("query counts %d current responses, the service has %d:\n%s", got, want, out)
	}

	// 6. Stop it as an operator would.
	_ = d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Errorf("run after SIGTERM: %v", err)
	}
}

// allSynced reports whether status lists n streams, each "synced".
func allSynced(status string, n int) bool {
	synced := 0
	for _, l := range strings.Split(status, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[3] == "synced" {
			synced++
		}
	}
	return synced == n
}
