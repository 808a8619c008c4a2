package webhookrx

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline/privacy"
)

// BenchmarkIntake measures events accepted per second over real HTTP on
// 127.0.0.1, each one written and fdatasync'ed to the spool before its 200,
// with 1 and 32 concurrent clients (the latter shares fsyncs: group
// commit). A no-op Processor drains the spool concurrently, so the commits
// of done marks are part of the cost; to_process is the time
// from the request's arrival to its Process call (spool + queue).
//
//	go test -run '^$' -bench Intake -benchtime 5000x ./webhookrx
//
// WEBHOOKRX_BENCH_CONCURRENCY sets ProcessConcurrency (default 256).
//
// clients=32/privacy runs with the daemon's privacy options: the field
// rules applied to each body before it is spooled (contact_id hashed) and
// an erasure check per request.
func BenchmarkIntake(b *testing.B) {
	for _, bc := range []struct {
		clients int
		privacy bool
	}{{1, false}, {32, false}, {32, true}} {
		clients := bc.clients
		name := fmt.Sprintf("clients=%d", clients)
		if bc.privacy {
			name += "/privacy"
		}
		b.Run(name, func(b *testing.B) {
			o := testOptions(b, "")
			o.SpoolMaxEvents = 10_000_000
			o.SpoolMaxBytes = 10 << 30
			if bc.privacy {
				pol, err := privacy.New(privacy.Options{ContactID: privacy.Hash, Key: []byte("bench-key-0123456789abcdef")})
				if err != nil {
					b.Fatal(err)
				}
				er := &erasedSet{}
				er.add("00000000-0000-4000-8000-000000000000")
				o.Redact, o.RedactRules, o.Erased = pol.Idempotent().WebhookBody, "bench", er.erased
			}
			if c := os.Getenv("WEBHOOKRX_BENCH_CONCURRENCY"); c != "" {
				o.ProcessConcurrency, _ = strconv.Atoi(c)
			}
			var pmu sync.Mutex
			var toProcess []time.Duration
			p := ProcessorFunc(func(_ context.Context, ev Event) error {
				d := time.Since(ev.ReceivedAt)
				pmu.Lock()
				toProcess = append(toProcess, d)
				pmu.Unlock()
				return nil
			})
			rx := start(b, o, p, nil)
			defer rx.stop() // each b.N round gets a fresh receiver and spool
			tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: time.Minute}
			// Bodies are unique so none is a duplicate.
			bodies := make([]string, b.N)
			for i := range bodies {
				bodies[i] = responseBody(i)
			}
			var next atomic.Int64
			lat := make([][]time.Duration, clients)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := int(next.Add(1)) - 1
						if i >= b.N {
							return
						}
						t0 := time.Now()
						resp, err := c.Post(rx.url, "application/json", strings.NewReader(bodies[i]))
						if err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							b.Errorf("status %d", resp.StatusCode)
							return
						}
						lat[w] = append(lat[w], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			if len(all) > 0 {
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99_ms")
			}
			waitFor(b, "all processed", func() bool { pmu.Lock(); defer pmu.Unlock(); return len(toProcess) == b.N })
			sort.Slice(toProcess, func(i, j int) bool { return toProcess[i] < toProcess[j] })
			b.ReportMetric(float64(toProcess[len(toProcess)/2].Microseconds())/1000, "to_process_p50_ms")
			b.ReportMetric(float64(toProcess[len(toProcess)*99/100].Microseconds())/1000, "to_process_p99_ms")
			mfs, _ := rx.reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "surveysync_webhook_spool_commit_events" {
					h := mf.GetMetric()[0].GetHistogram()
					b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "events/commit")
				}
				if mf.GetName() == "surveysync_webhook_spool_commit_duration_seconds" {
					h := mf.GetMetric()[0].GetHistogram()
					b.ReportMetric(1000*h.GetSampleSum()/float64(h.GetSampleCount()), "commit_ms")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
