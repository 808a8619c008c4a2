package main

// The webhook intake through the real binary (issue 32, item 2): a
// measurement, not a check (the rate depends on this machine's disk and
// load), run on demand:
//
//	SURVEYSYNC_BENCH_INTAKE=1 go test -count=1 -run TestBenchWebhookIntake -v ./cmd/surveysync
//
// The daemon (Parquet sink, the emulator as the service) takes 5,000
// webhooks naming responses that do not exist, from 32 senders, then
// 1,000 from one sender; it processes them meanwhile (each is fetched,
// answered 404 and rejected, as in the junk flood of issue 32). The log
// line gives both rates.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
)

func TestBenchWebhookIntake(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_INTAKE") == "" {
		t.Skip("a measurement: set SURVEYSYNC_BENCH_INTAKE=1")
	}
	spool := t.TempDir()
	port, path := freePort(t), "/hooks/e2e-"+randHex(8)
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 10, 91)})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n"+
		"webhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n  spool_max_events: 1000000\n", port, path, spool))
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n"})
	d := startDaemon(t, cfg)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 60*time.Second)

	sid := e.ids[0]
	body := func() []byte {
		id := strings.ToUpper(fmt.Sprintf("%s-%s-4%s-8%s-%s", randHex(4), randHex(2), randHex(2)[1:], randHex(2)[1:], randHex(6)))
		return fmt.Appendf(nil, `{"event_name":"response_received","survey_id":%d,"response_id":%q,"distribution_type":"link","completed":true,"completed_at":%q}`,
			sid, id, time.Now().UTC().Format(time.RFC3339))
	}
	rate := func(clients, n int) float64 {
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i] = body()
		}
		tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: time.Minute}
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					resp, err := c.Post(url, "application/json", bytes.NewReader(bodies[i]))
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}
	r32 := rate(32, 5000)
	r1 := rate(1, 1000)
	t.Logf("intake through the binary while it processes: 32 senders %.0f events/s, 1 sender %.0f events/s", r32, r1)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 2*time.Minute)
}
