// Package clientbench_test measures the API client (source/surveyapi)
// against the emulator (source/sim) in one run: the emulator's ceiling —
// response details per second served over loopback HTTP to a trivial raw
// net/http client that only reads the bytes — and the client's rate through
// its full path (limiter, retries bookkeeping, metrics, single-pass decode
// into survey.Response) at 16, 64 and 256 concurrent requests. Both run in
// this process on the same cores, alternating in short rounds so that the
// machine's load drifts equally over both; the medians are reported, as
// requests per wall-clock second and per CPU-second of the process (the
// latter does not depend on what else the shared machine is running).
//
// TestClientSmoke always runs (a fraction of a second). The figures of
// docs/benchmarks.md ("Client vs emulator (issue 2)") come from
// TestClientVsEmulator, which runs only with SURVEYSYNC_BENCH_CLIENT=1:
//
//	SURVEYSYNC_BENCH_CLIENT=1 go test -run TestClientVsEmulator -v -timeout 20m ./bench/clientbench/
//
// SURVEYSYNC_BENCH_ROUNDS (default 9) and SURVEYSYNC_BENCH_SECONDS (per
// round, default 1) shorten or lengthen it, SURVEYSYNC_BENCH_CONC (default
// 16,64,256) picks the concurrencies; SURVEYSYNC_BENCH_OUT=file also writes
// the table there.
package clientbench_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline/survey"
	"github.com/surveysync/surveysync/source/sim"
	"github.com/surveysync/surveysync/source/surveyapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token    = "bench-token"
	ua       = "surveysync-bench (dev@example.com)"
	surveyID = 4574
)

type env struct {
	srv *httptest.Server
	ids []survey.GUID
}

func newEnv(t testing.TB, responses int) *env {
	s, err := sim.New(sim.Options{Token: token, Seed: 1,
		Surveys: []sim.SurveySpec{{ID: surveyID, Responses: responses, Seed: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	e := &env{srv: srv}
	c := newClient(t, e, 4)
	for page := 1; len(e.ids) < 2000; page++ {
		l, err := c.ListResponses(context.Background(), surveyID, survey.ListQuery{Page: page, PerPage: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Data) == 0 {
			break
		}
		for _, r := range l.Data {
			e.ids = append(e.ids, r.ResponseID)
		}
	}
	if len(e.ids) == 0 {
		t.Fatal("the emulator listed no responses")
	}
	return e
}

func newClient(t testing.TB, e *env, conc int) *surveyapi.Client {
	c, err := surveyapi.New(surveyapi.Options{BaseURL: e.srv.URL + "/v1", Token: token, UserAgent: ua, MaxConcurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// result of one round.
type result struct {
	n          int64
	elapsed    time.Duration
	cpu        time.Duration // process CPU time (user + system): emulator + caller
	bytesAlloc uint64        // whole process (emulator + caller)
}

func (r result) rate() float64 { return float64(r.n) / r.elapsed.Seconds() }

// cpuRate is requests per CPU-second of the process: what the rate would be
// on one dedicated core, whatever else the machine is doing.
func (r result) cpuRate() float64 { return float64(r.n) / r.cpu.Seconds() }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run calls do from conc goroutines for d and counts the calls.
func run(t testing.TB, conc int, d time.Duration, do func(i int) error) result {
	var n atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	c0 := cpuTime()
	t0 := time.Now()
	for g := range conc {
		wg.Go(func() {
			for i := g; !stop.Load(); i += conc {
				if err := do(i); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	el := time.Since(t0)
	cpu := cpuTime() - c0
	runtime.ReadMemStats(&ms1)
	return result{n: n.Load(), elapsed: el, cpu: cpu, bytesAlloc: ms1.TotalAlloc - ms0.TotalAlloc}
}

// rawGet is the trivial client: one GET with the API headers, body read and dropped.
func rawGetter(e *env, conc int) (func(i int) error, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxIdleConns: conc}
	hc := &http.Client{Transport: tr}
	base := e.srv.URL + "/v1/surveys/4574/responses/"
	return func(i int) error {
		req, _ := http.NewRequest(http.MethodGet, base+string(e.ids[i%len(e.ids)]), nil)
		req.Header["X-API-TOKEN"] = []string{token}
		req.Header["User-Agent"] = []string{ua}
		req.Header["Accept"] = []string{"application/json"}
		req.Header["Content-Type"] = []string{"application/json"}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("raw: HTTP %d", resp.StatusCode)
		}
		return err
	}, tr.CloseIdleConnections
}

func clientGetter(t testing.TB, e *env, conc int) func(i int) error {
	c := newClient(t, e, conc)
	return func(i int) error {
		r, err := c.GetResponse(context.Background(), surveyID, e.ids[i%len(e.ids)])
		if err == nil && r.ResponseID == "" {
			err = fmt.Errorf("empty response")
		}
		return err
	}
}

type row struct {
	conc                 int
	raw, client          []result
	rawMedian, cliMedian float64 // req/s, wall clock
	rawCPU, cliCPU       float64 // req per CPU-second
	ratio, ratioCPU      float64 // median over rounds of client / raw of the same round
	rawKB, cliKB         float64
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return medianOf(v)
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// measure runs, per concurrency, rounds of the raw client and of
// surveyapi.Client back to back (alternating which goes first, after a
// GC each, so that neither inherits the other's garbage), and takes the
// ratio within each round: the machine's load drifts, but hardly within
// one round. The median of those ratios is the figure.
func measure(t *testing.T, e *env, concs []int, rounds int, d time.Duration) []row {
	var rows []row
	for _, conc := range concs {
		rw := row{conc: conc}
		raw, closeRaw := rawGetter(e, conc)
		cli := clientGetter(t, e, conc)
		var ratios, ratiosCPU []float64
		for i := range rounds {
			var r, c result
			if i%2 == 0 {
				runtime.GC()
				r = run(t, conc, d, raw)
				runtime.GC()
				c = run(t, conc, d, cli)
			} else {
				runtime.GC()
				c = run(t, conc, d, cli)
				runtime.GC()
				r = run(t, conc, d, raw)
			}
			rw.raw, rw.client = append(rw.raw, r), append(rw.client, c)
			ratios = append(ratios, c.rate()/r.rate())
			ratiosCPU = append(ratiosCPU, c.cpuRate()/r.cpuRate())
		}
		closeRaw()
		rw.rawMedian = median(rw.raw, result.rate)
		rw.cliMedian = median(rw.client, result.rate)
		rw.rawCPU = median(rw.raw, result.cpuRate)
		rw.cliCPU = median(rw.client, result.cpuRate)
		rw.ratio, rw.ratioCPU = medianOf(ratios), medianOf(ratiosCPU)
		perReqKB := func(r result) float64 { return float64(r.bytesAlloc) / float64(r.n) / 1024 }
		rw.rawKB = median(rw.raw, perReqKB)
		rw.cliKB = median(rw.client, perReqKB)
		rows = append(rows, rw)
	}
	return rows
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func TestClientSmoke(t *testing.T) {
	e := newEnv(t, 3000)
	rows := measure(t, e, []int{16}, 1, 100*time.Millisecond)
	if rows[0].raw[0].n == 0 || rows[0].client[0].n == 0 {
		t.Fatalf("no requests: %+v", rows[0])
	}
}

func TestClientVsEmulator(t *testing.T) {
	if os.Getenv("SURVEYSYNC_BENCH_CLIENT") == "" {
		t.Skip("set SURVEYSYNC_BENCH_CLIENT=1 to run the client-vs-emulator benchmark")
	}
	rounds, secs := 9, 1.0
	if v, err := strconv.Atoi(os.Getenv("SURVEYSYNC_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("SURVEYSYNC_BENCH_SECONDS"), 64); err == nil && v > 0 {
		secs = v
	}
	e := newEnv(t, 100000)
	concs := []int{16, 64, 256}
	if v := os.Getenv("SURVEYSYNC_BENCH_CONC"); v != "" {
		concs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("SURVEYSYNC_BENCH_CONC=%q: want a comma-separated list of positive integers", v)
			}
			concs = append(concs, n)
		}
	}
	rows := measure(t, e, concs, rounds, time.Duration(secs*float64(time.Second)))

	ceiling, ceilingCPU := 0.0, 0.0
	for _, r := range rows {
		ceiling = max(ceiling, r.rawMedian)
		ceilingCPU = max(ceilingCPU, r.rawCPU)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GOMAXPROCS=%d, %s, %s, load average %s\n", runtime.GOMAXPROCS(0), runtime.Version(), time.Now().UTC().Format(time.RFC3339), loadAvg())
	fmt.Fprintf(&b, "| concurrent requests | raw client: req/s (per CPU-s) | surveyapi.Client: req/s (per CPU-s) | client / raw, wall clock | client / raw, per CPU-s | client / best raw, per CPU-s | alloc per request raw → client (whole process) |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %.0f (%.0f) | %.0f (%.0f) | %.0f %% | %.0f %% | %.0f %% | %.1f KB → %.1f KB (+%.1f KB) |\n",
			r.conc, r.rawMedian, r.rawCPU, r.cliMedian, r.cliCPU, 100*r.ratio, 100*r.ratioCPU,
			100*r.cliCPU/ceilingCPU, r.rawKB, r.cliKB, r.cliKB-r.rawKB)
	}
	fmt.Fprintf(&b, "client / raw: median over the rounds of the ratio within a round (raw and client back to back)\n")
	fmt.Fprintf(&b, "emulator ceiling (best raw median): %.0f req/s wall clock, %.0f req per CPU-second\n", ceiling, ceilingCPU)
	for _, r := range rows {
		var raw, cli []string
		for i := range r.raw {
			raw = append(raw, fmt.Sprintf("%.0f/%.0f", r.raw[i].rate(), r.raw[i].cpuRate()))
			cli = append(cli, fmt.Sprintf("%.0f/%.0f", r.client[i].rate(), r.client[i].cpuRate()))
		}
		fmt.Fprintf(&b, "rounds at %d (req/s / req per CPU-s): raw %s; client %s\n", r.conc, strings.Join(raw, " "), strings.Join(cli, " "))
	}
	t.Log("\n" + b.String())
	if out := os.Getenv("SURVEYSYNC_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
