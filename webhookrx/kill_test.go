package webhookrx

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "WEBHOOKRX_TEST_HELPER_SPOOL_DIR"

// runHelperReceiver runs a receiver whose Processor never finishes, prints
// its address and serves until killed. It is the child of TestSIGKILLReplay.
func runHelperReceiver(dir string) int {
	block := make(chan struct{})
	p := ProcessorFunc(func(ctx context.Context, ev Event) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	r, err := New(Options{Listen: "127.0.0.1:0", Path: testPath, SpoolDir: dir}, p, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	for r.Addr() == "" {
		select {
		case err := <-errc:
			fmt.Fprintln(os.Stderr, err)
			return 2
		case <-time.After(time.Millisecond):
		}
	}
	fmt.Println("ADDR", r.Addr())
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A real crash: a child process accepts 1 000 events (none processed) and is
// SIGKILLed; a new Receiver on the same spool dir processes all of them, in
// order, exactly once.
func TestSIGKILLReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	sc := bufio.NewScanner(out)
	var addr string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("child did not report its address")
	}
	const n = 1000
	sendConcurrently(t, "http://"+addr+testPath, n, 16)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true

	p := newRecorder()
	o := testOptions(t, dir)
	o.ProcessConcurrency = 1
	rx := start(t, o, p, nil)
	waitFor(t, "all replayed", func() bool { return len(p.processed()) == n })
	got := p.processed()
	assertOnce(t, got, n)
	for i := 1; i < n; i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("out of order at %d", i)
		}
	}
	want := map[string]bool{}
	for i := range n {
		want[bodyID([]byte(responseBody(i)))] = true
	}
	for _, ev := range got {
		if !want[ev.ID] {
			t.Fatalf("replayed an event never sent: %s", ev.ID)
		}
	}
	waitFor(t, "spool emptied", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
}
