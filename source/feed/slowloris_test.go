package feed_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/feedtest"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/webhookrx"
)

// The child of TestSlowlorisOnFeedPort: a process with few file descriptors
// (RLIMIT_NOFILE 64) serving an http feed and a webhook receiver, like the
// daemon. It prints both addresses and serves until its stdin closes.
func TestSlowlorisChild(t *testing.T) {
	if os.Getenv("FEED_SLOWLORIS_CHILD") == "" {
		t.Skip("child process of TestSlowlorisOnFeedPort")
	}
	lim := syscall.Rlimit{Cur: 64, Max: 64}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ledger, err := parquet.NewFileLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	feedAddr := probe.Addr().String()
	probe.Close()
	maxConns := 16
	if os.Getenv("FEED_SLOWLORIS_NOCAP") != "" {
		maxConns = 1 << 20 // what the feed listener had before: no cap
	}
	r, err := feed.NewRunner(feed.RunnerOptions{
		Feeds: []feed.Options{{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Channel: feed.ChannelEmail,
			Mapping: map[string]string{"email": "email"}, HTTP: feed.HTTPOptions{Path: "/feeds/web", Token: "s3cret", Listen: feedAddr}}},
		Ledger:     ledger,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		HTTPServer: feed.HTTPServerOptions{MaxConns: maxConns, ReadHeaderTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	rx, err := webhookrx.New(webhookrx.Options{Listen: "127.0.0.1:0", Path: "/hooks/0123456789abcdef", SpoolDir: t.TempDir(), MaxConns: 16},
		webhookrx.ProcessorFunc(func(context.Context, webhookrx.Event) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = r.Run(ctx) }()
	go func() { defer wg.Done(); _ = rx.Run(ctx) }()
	for rx.Addr() == "" {
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("ADDRS %s %s\n", feedAddr, rx.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
}

// A slowloris on the feed port (many connections sending their headers a
// byte at a time) must not exhaust the process's file descriptors: the
// webhook port keeps answering at once, and the slow connections are cut by
// the header timeout (issue 12 part 5).
func TestSlowlorisOnFeedPort(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSlowlorisChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FEED_SLOWLORIS_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}()
	sc := bufio.NewScanner(stdout)
	var feedAddr, hookAddr string
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ADDRS" {
			feedAddr, hookAddr = f[1], f[2]
			break
		}
	}
	if hookAddr == "" {
		t.Fatal("child did not start")
	}
	go io.Copy(io.Discard, stdout)

	// 150 slow clients: more than the child's 64 descriptors.
	const slow = 150
	var closed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	start := time.Now()
	for range slow {
		c, err := net.Dial("tcp", feedAddr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if _, err := io.WriteString(c, "POST /feeds/web HTTP/1.1\r\nHost: x\r\n"); err != nil {
				closed.Add(1)
				return
			}
			// Then a header byte every 100 ms, never finishing; a read sees
			// the server's close.
			go func() {
				buf := make([]byte, 1)
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := c.Write([]byte("X")); err != nil {
						return
					}
					_ = buf
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, c)
			closed.Add(1)
		}()
	}
	time.Sleep(300 * time.Millisecond) // the slowloris is under way

	// The webhook port answers at once.
	body := `{"event_name": "survey_launched", "survey_id": 4574, "launched_at": "2022-08-21T10:30:00Z"}`
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 5 {
		t0 := time.Now()
		res, err := client.Post("http://"+hookAddr+"/hooks/0123456789abcdef", "application/json",
			strings.NewReader(strings.Replace(body, "4574", strconv.Itoa(4574+i), 1)))
		if err != nil {
			t.Fatalf("webhook during the slowloris: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || time.Since(t0) > time.Second {
			t.Fatalf("webhook during the slowloris: %d after %v", res.StatusCode, time.Since(t0))
		}
	}
	// The slow connections are cut by the 1 s header timeout, 16 at a time.
	deadline := time.Now().Add(25 * time.Second)
	for closed.Load() < slow && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	if n := closed.Load(); n < slow {
		t.Fatalf("only %d of %d slow connections cut after %v", n, slow, time.Since(start))
	}
	t.Logf("%d slow connections cut in %v; webhooks answered meanwhile", slow, time.Since(start).Round(time.Millisecond))
	wg.Wait()
	// The feed port serves again.
	res, err := client.Get("http://" + feedAddr + "/feeds/web")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("feed port after the slowloris: %d", res.StatusCode)
	}
}

// The feed listener's bounds do not cut honest work: a push that takes
// longer than ReadTimeout and WriteTimeout still gets its answer (net/http
// lifts the read deadline once the body is read; the write deadline counts
// from the end of the push), and a request beyond MaxRequests waits for a
// slot, then gets 503 + Retry-After.
func TestFeedListenerBounds(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.SetDelay(100 * time.Millisecond)
	ledger, err := parquet.NewFileLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	r, err := feed.NewRunner(feed.RunnerOptions{
		Feeds: []feed.Options{{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Channel: feed.ChannelEmail, Concurrency: 1, ChunkRows: 2,
			Mapping: map[string]string{"email": "email"}, HTTP: feed.HTTPOptions{Path: "/feeds/web", Token: "s3cret", Listen: addr}}},
		API: newClient(t, svc.URL(), 5*time.Second), Ledger: ledger, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		HTTPServer: feed.HTTPServerOptions{MaxRequests: 1, RequestWait: 200 * time.Millisecond,
			ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	post := func(body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/feeds/web", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		return http.DefaultClient.Do(req)
	}
	var rows []string
	for i := range 10 { // 10 calls of 100 ms, one at a time: ~1 s
		rows = append(rows, fmt.Sprintf(`{"email": "c%d@example.cz"}`, i))
	}
	for range 200 { // the listener is up once it answers
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	long := make(chan error, 1)
	go func() {
		res, err := post("[" + strings.Join(rows, ",") + "]")
		if err == nil {
			var out feed.HTTPResponse
			err = json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			if err == nil && (res.StatusCode != 200 || out.Pushed != 10) {
				err = fmt.Errorf("long push: %d, %+v", res.StatusCode, out.Summary)
			}
		}
		long <- err
	}()
	time.Sleep(100 * time.Millisecond)
	res, err := post(`{"email": "other@example.cz"}`)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("a second request while the only slot is busy: %d %v", res.StatusCode, res.Header)
	}
	if err := <-long; err != nil {
		t.Fatal(err)
	}
}
