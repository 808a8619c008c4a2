package webhookrx

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
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

// startChild starts a child process running runHelperReceiver on dir and
// returns its URL and a function that SIGKILLs it (called at cleanup too).
func startChild(t *testing.T, dir string) (url string, kill func()) {
	t.Helper()
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
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			return "http://" + a + testPath, kill
		}
	}
	t.Fatal("child did not report its address")
	return "", nil
}

// A real crash: a child process accepts 1 000 events (none processed) and is
// SIGKILLed; a new Receiver on the same spool dir processes all of them, in
// order, exactly once.
func TestSIGKILLReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	url, kill := startChild(t, dir)
	const n = 1000
	sendConcurrently(t, url, n, 16)
	kill()

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

// SIGKILL in the middle of group commits: 32 clients keep posting while
// the child is killed, so commits are under way. Every event answered 200
// is replayed and processed exactly once; the others (no answer, or an
// error) may or may not be, never twice; nothing unsent appears.
func TestSIGKILLDuringGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	url, kill := startChild(t, dir)
	const clients, limit = 32, 20000
	var next, oks atomic.Int64
	var mu sync.Mutex
	acked := map[string]bool{}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= limit {
					return
				}
				body := responseBody(i)
				resp, err := c.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					return // killed
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					acked[bodyID([]byte(body))] = true
					mu.Unlock()
					oks.Add(1)
				}
			}
		}()
	}
	waitFor(t, "500 events acknowledged", func() bool { return oks.Load() >= 500 })
	kill()
	wg.Wait()
	sent := int(min(next.Load(), limit))

	p := newRecorder()
	o := testOptions(t, dir)
	rx := start(t, o, p, nil)
	waitFor(t, "spool emptied", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
	got := p.processed()
	seen := map[string]int{}
	for _, ev := range got {
		seen[ev.ID]++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("acknowledged event %s… processed %d times", id[:8], seen[id])
		}
	}
	valid := map[string]bool{}
	for i := range sent {
		valid[bodyID([]byte(responseBody(i)))] = true
	}
	for id, n := range seen {
		if !valid[id] || n != 1 {
			t.Errorf("event %s… (sent: %v) processed %d times", id[:8], valid[id], n)
		}
	}
	t.Logf("killed with %d of %d requests acknowledged; %d replayed", len(acked), sent, len(got))
}
