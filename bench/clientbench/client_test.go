// Package clientbench_test measures the API client (source/surveyapi)
// against the emulator (sim) in one run: the emulator's ceiling —
// response details per second served over loopback HTTP to a trivial
// client that only reads the bytes — and the client's rate through its
// full path (limiter, retries bookkeeping, metrics, net/http, body budget,
// encoding/json decode into survey.Response) at 16, 64 and 256 concurrent
// requests. Two trivial clients give the ceiling: a raw net/http GET (what a
// script would do) and a lean hand-written HTTP/1.1 GET that skips the body
// (the least CPU a caller can spend, so the most the emulator can serve on
// these cores). The lean caller is a bench-only ceiling: the product has
// no hand-written HTTP client since issue 13.
// All run in this process on the same cores, in short rounds back to back
// so that the machine's load drifts equally over them; the medians are
// reported, as requests per wall-clock second and per CPU-second of the
// process (the latter does not depend on what else the shared machine is
// running).
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
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
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

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token    = "bench-token"
	ua       = "surveysync-bench (dev@example.com)"
	surveyID = 4574
)

type env struct {
	url string // the emulator's base, without /v1
	ids []survey.GUID
}

// newEnv starts the emulator in this process, or, with
// SURVEYSYNC_BENCH_EMULATOR=host:port, uses a surveysim already running
// there (its own process: give it and this one a core each with taskset to
// see what each side costs; start it with --token bench-token).
func newEnv(t testing.TB, responses int) *env {
	e := &env{}
	if addr := os.Getenv("SURVEYSYNC_BENCH_EMULATOR"); addr != "" {
		e.url = "http://" + addr
	} else {
		s, err := sim.New(sim.Options{Token: token, Seed: 1,
			Surveys: []sim.SurveySpec{{ID: surveyID, Responses: responses, Seed: 7}}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(func() { srv.Close(); s.Close() })
		e.url = srv.URL
	}
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
	c, err := surveyapi.New(surveyapi.Options{BaseURL: e.url + "/v1", Token: token, UserAgent: ua, MaxConcurrency: conc})
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
	base := e.url + "/v1/surveys/4574/responses/"
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

// leanGetter is the cheapest client there is: a hand-written HTTP/1.1 GET
// on a pooled keep-alive connection, status line and headers scanned for
// the framing only, body skipped. Against it the emulator shows what it
// can serve when the caller costs next to nothing; net/http's transport
// (rawGetter) costs more CPU per request than the emulator's handler.
func leanGetter(e *env, conc int) (func(i int) error, func()) {
	addr := strings.TrimPrefix(e.url, "http://")
	head := " HTTP/1.1\r\nHost: " + addr + "\r\nX-API-TOKEN: " + token + "\r\nUser-Agent: " + ua +
		"\r\nAccept: application/json\r\nContent-Type: application/json\r\n\r\n"
	pool := make(chan *leanConn, conc)
	closeAll := func() {
		for {
			select {
			case c := <-pool:
				c.nc.Close()
			default:
				return
			}
		}
	}
	return func(i int) error {
		var c *leanConn
		select {
		case c = <-pool:
		default:
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			c = &leanConn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 4<<10)}
		}
		c.bw.WriteString("GET /v1/surveys/4574/responses/")
		c.bw.WriteString(string(e.ids[i%len(e.ids)]))
		c.bw.WriteString(head)
		err := c.bw.Flush()
		if err == nil {
			err = c.readAnswer()
		}
		if err != nil {
			c.nc.Close()
			return err
		}
		select {
		case pool <- c:
		default:
			c.nc.Close()
		}
		return nil
	}, closeAll
}

type leanConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func (c *leanConn) readAnswer() error {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 12 || string(line[9:12]) != "200" {
		return fmt.Errorf("lean: %q", line)
	}
	length, chunked := int64(-1), false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		k, v, _ := bytes.Cut(line, []byte{':'})
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return err
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = true
		}
	}
	if chunked {
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(c.br)); err != nil {
			return err
		}
		_, err = c.br.ReadSlice('\n') // the empty trailer section
		return err
	}
	if length < 0 {
		return errors.New("lean: no length")
	}
	_, err = c.br.Discard(int(length))
	return err
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

// row is one concurrency: rounds of each caller, and per round the ratio
// of the client to each trivial caller.
type row struct {
	conc                    int
	raw, lean, client       []result
	rawMedian, leanMedian   float64 // req/s, wall clock
	cliMedian               float64
	rawCPU, leanCPU, cliCPU float64 // req per CPU-second
	ratio, ratioCPU         float64 // median over rounds of client / raw (net/http) of the same round
	ratioLean, ratioLeanCPU float64 // the same against the lean caller
	rawKB, leanKB, cliKB    float64
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

// measure runs, per concurrency, rounds of the three callers back to back
// — net/http raw, lean raw, surveyapi.Client — rotating which goes first,
// after a GC each so that none inherits another's garbage, and takes the
// ratios within each round: the machine's load drifts, but hardly within
// one round. The median of those ratios is the figure.
func measure(t *testing.T, e *env, concs []int, rounds int, d time.Duration) []row {
	var rows []row
	for _, conc := range concs {
		rw := row{conc: conc}
		raw, closeRaw := rawGetter(e, conc)
		lean, closeLean := leanGetter(e, conc)
		cli := clientGetter(t, e, conc)
		var ratios, ratiosCPU, ratiosLean, ratiosLeanCPU []float64
		for i := range rounds {
			var got [3]result
			callers := [3]func(int) error{raw, lean, cli}
			for k := range 3 {
				j := (i + k) % 3
				runtime.GC()
				got[j] = run(t, conc, d, callers[j])
			}
			r, l, c := got[0], got[1], got[2]
			rw.raw, rw.lean, rw.client = append(rw.raw, r), append(rw.lean, l), append(rw.client, c)
			ratios = append(ratios, c.rate()/r.rate())
			ratiosCPU = append(ratiosCPU, c.cpuRate()/r.cpuRate())
			ratiosLean = append(ratiosLean, c.rate()/l.rate())
			ratiosLeanCPU = append(ratiosLeanCPU, c.cpuRate()/l.cpuRate())
		}
		closeRaw()
		closeLean()
		rw.rawMedian, rw.leanMedian = median(rw.raw, result.rate), median(rw.lean, result.rate)
		rw.cliMedian = median(rw.client, result.rate)
		rw.rawCPU, rw.leanCPU = median(rw.raw, result.cpuRate), median(rw.lean, result.cpuRate)
		rw.cliCPU = median(rw.client, result.cpuRate)
		rw.ratio, rw.ratioCPU = medianOf(ratios), medianOf(ratiosCPU)
		rw.ratioLean, rw.ratioLeanCPU = medianOf(ratiosLean), medianOf(ratiosLeanCPU)
		perReqKB := func(r result) float64 { return float64(r.bytesAlloc) / float64(r.n) / 1024 }
		rw.rawKB, rw.leanKB = median(rw.raw, perReqKB), median(rw.lean, perReqKB)
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
	if rows[0].raw[0].n == 0 || rows[0].lean[0].n == 0 || rows[0].client[0].n == 0 {
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
		ceiling = max(ceiling, r.rawMedian, r.leanMedian)
		ceilingCPU = max(ceilingCPU, r.rawCPU, r.leanCPU)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GOMAXPROCS=%d, %s, %s, load average %s\n", runtime.GOMAXPROCS(0), runtime.Version(), time.Now().UTC().Format(time.RFC3339), loadAvg())
	fmt.Fprintf(&b, "| concurrent requests | trivial net/http client: req/s (per CPU-s) | lean raw client: req/s (per CPU-s) | surveyapi.Client: req/s (per CPU-s) | client / net/http, wall (per CPU-s) | client / lean, wall (per CPU-s) | client / ceiling, wall (per CPU-s) | alloc per request, whole process: net/http, lean → client |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %.0f %% (%.0f %%) | %.0f %% (%.0f %%) | %.0f %% (%.0f %%) | %.1f KB, %.1f KB → %.1f KB |\n",
			r.conc, r.rawMedian, r.rawCPU, r.leanMedian, r.leanCPU, r.cliMedian, r.cliCPU,
			100*r.ratio, 100*r.ratioCPU, 100*r.ratioLean, 100*r.ratioLeanCPU,
			100*r.cliMedian/ceiling, 100*r.cliCPU/ceilingCPU, r.rawKB, r.leanKB, r.cliKB)
	}
	fmt.Fprintf(&b, "client / X: median over the rounds of the ratio within a round (the three callers back to back)\n")
	fmt.Fprintf(&b, "emulator ceiling (best trivial-client median over all concurrencies): %.0f req/s wall clock, %.0f req per CPU-second\n", ceiling, ceilingCPU)
	for _, r := range rows {
		f := func(rs []result) string {
			var out []string
			for _, x := range rs {
				out = append(out, fmt.Sprintf("%.0f/%.0f", x.rate(), x.cpuRate()))
			}
			return strings.Join(out, " ")
		}
		fmt.Fprintf(&b, "rounds at %d (req/s / req per CPU-s): net/http %s; lean %s; client %s\n", r.conc, f(r.raw), f(r.lean), f(r.client))
	}
	t.Log("\n" + b.String())
	if out := os.Getenv("SURVEYSYNC_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
