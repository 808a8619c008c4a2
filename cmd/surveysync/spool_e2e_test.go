package main

// The webhook spool through the real binary (issue 32): a damaged
// spool.db is moved aside at start with a WARN, and the daemon runs and
// takes webhooks instead of panicking at every start.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

// postWebhooks posts n distinct events the daemon keeps and ignores
// (unknown event names: spooled, logged, never processed), from 8
// clients: they fill the spool's file with done marks and free pages.
func postWebhooks(t *testing.T, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < n; i += 8 {
				body := fmt.Sprintf(`{"event_name":"spool_filler","survey_id":1,"n":%d,"pad":%q}`, i, strings.Repeat("p", 200))
				resp, err := http.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("webhook %d: status %d", i, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestDamagedSpoolIsMovedAsideAtStart(t *testing.T) {
	spool := t.TempDir()
	port, path := freePort(t), "/hooks/e2e-"+randHex(8)
	hookURL := fmt.Sprintf("http://127.0.0.1:%d%s", port, path)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 10, 81),
		WebhookURL: hookURL, WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second, 2 * time.Second}})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, e, nil, fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\n  batch:\n    max_delay: 100ms\n"+
		"webhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", port, path, spool))
	dataDir := filepath.Join(filepath.Dir(cfg), "data")
	rewriteConfig(t, cfg, map[string]string{"metrics:\n  listen: \"\"\n": "metrics:\n  listen: " + metrics + "\n"})

	d := startDaemon(t, cfg)
	waitReadyz(t, d, metrics, http.StatusOK, "ready", 60*time.Second)
	postWebhooks(t, hookURL, 1500)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
	db := filepath.Join(spool, "spool.db")
	sound, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("spool.db: %d bytes", len(sound))

	responses := 10
	noise := func(b []byte, at int) []byte {
		rng := rand.New(rand.NewPCG(32, 3))
		for i := at; i < at+4096 && i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		// mayBeSound: the damage may fall on a free page (the spool was
		// drained before the stop), which no reader ever looks at: then
		// there is nothing to recover and no warning is due.
		mayBeSound bool
	}{
		{"4 KiB of noise in the middle", func(b []byte) []byte { return noise(b, len(b)/2&^4095) }, true},
		{"4 KiB of noise over the root page", func(b []byte) []byte { return noise(b, boltRootPage(t, b)*4096) }, false},
		{"truncated to a third", func(b []byte) []byte { return b[:len(b)/3] }, false},
		{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, old := range globAll(t, db+".damaged-*") {
				_ = os.Remove(old)
			}
			if err := os.WriteFile(db, tc.damage(bytes.Clone(sound)), 0o600); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, cfg)
			waitReadyz(t, d, metrics, http.StatusOK, "ready", 60*time.Second)
			// A webhook after the recovery is taken and processed: the
			// response reaches the output with polling an hour away.
			now := time.Now().UTC().Add(-2 * time.Minute)
			r, err := e.sim.AddResponse(e.ids[0], survey.Response{ResponseStatus: survey.StatusCompleted,
				DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)})
			if err != nil {
				t.Fatal(err)
			}
			responses++
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				cur, err := parquet.ReadCurrent(context.Background(), dataDir, 0)
				if err == nil && cur.Responses[string(r.ResponseID)] != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the webhook's response %s is not in the output: %v; output:\n%s", r.ResponseID, err, tail(d.output(), 30))
				}
			}
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			d.wait(t, 60*time.Second)
			out := d.output()
			if strings.Contains(out, "panic") {
				t.Fatalf("panic:\n%s", tail(out, 40))
			}
			var warn string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "spool's database is damaged") {
					warn = l
				}
			}
			if warn == "" && tc.mayBeSound {
				t.Log("the noise fell on a page the database does not use: nothing to recover")
				return
			}
			if !strings.Contains(warn, "level=WARN") || !strings.Contains(warn, db) || !strings.Contains(warn, "polling and reconcile") {
				t.Fatalf("no WARN naming %s and what recovers the loss:\n%s", db, tail(out, 40))
			}
			if aside := globAll(t, db+".damaged-*"); len(aside) != 1 || !strings.Contains(warn, aside[0]) {
				t.Fatalf("the damaged file kept as %v; the WARN: %s", aside, warn)
			}
			t.Log(warn)
		})
	}
}

func globAll(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// boltRootPage is the page id of the root bucket's page in the bbolt file b
// (4 KiB pages): from the meta page (page 0 or 1) with the higher
// transaction id. The page header is 16 bytes; in the meta that follows,
// the root bucket's page id is at 16 and the transaction id at 48.
func boltRootPage(t *testing.T, b []byte) int {
	t.Helper()
	if len(b) < 2*4096 {
		t.Fatalf("spool.db of %d bytes has no two meta pages", len(b))
	}
	best, txid := 0, uint64(0)
	for _, off := range []int{16, 4096 + 16} {
		root := int(binary.LittleEndian.Uint64(b[off+16:]))
		if tx := binary.LittleEndian.Uint64(b[off+48:]); tx >= txid && root > 1 && root*4096 < len(b) {
			best, txid = root, tx
		}
	}
	if best == 0 {
		t.Fatal("spool.db: no meta page names a root page in the file")
	}
	return best
}
