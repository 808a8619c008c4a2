package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// discard is a ResponseWriter that keeps nothing, to measure the handler.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// cpuTime is the process's user+system CPU time: on a shared machine it
// measures the cost per request better than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds the CPU time per operation and operations per CPU second.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "req/cpu-s")
}

func benchSim(b *testing.B, n int) (*Sim, []string) {
	b.Helper()
	clk := newClock()
	s, err := New(Options{Token: testToken, Now: clk.Now, Surveys: []SurveySpec{{ID: 4574, Responses: n, Seed: 7, Files: true}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	g := s.surveys[4574].gen
	paths := make([]string, 0, 4096)
	for i := 0; i < 4096; i++ {
		paths = append(paths, "/v1/surveys/4574/responses/"+g.baseGUID(i*(n/4096)).String())
	}
	return s, paths
}

// BenchmarkDetailHandler measures detail requests served by the handler
// itself, in process (no network): the emulator's own cost per request.
func BenchmarkDetailHandler(b *testing.B) {
	s, paths := benchSim(b, 1_000_000)
	h := s.Handler()
	reqs := make([]*http.Request, len(paths))
	for k, p := range paths {
		reqs[k] = httptest.NewRequest("GET", p, nil)
		reqs[k].Header.Set("X-API-TOKEN", testToken)
	}
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	reportCPU(b, cpu0)
}

// BenchmarkDetailLoopback measures detail requests over loopback HTTP with
// keep-alive clients in parallel (client and server share the machine).
func BenchmarkDetailLoopback(b *testing.B) {
	s, paths := benchSim(b, 1_000_000)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := paths[next.Add(1)%int64(len(paths))]
			req, _ := http.NewRequest("GET", srv.URL+p, nil)
			req.Header.Set("X-API-TOKEN", testToken)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
	reportCPU(b, cpu0) // client and server together
}

// BenchmarkListPage measures a list page of 1000 ids out of a million.
func BenchmarkListPage(b *testing.B) {
	s, _ := benchSim(b, 1_000_000)
	h := s.Handler()
	w := &discard{h: http.Header{}}
	warm := httptest.NewRequest("GET", "/v1/surveys/4574/responses", nil)
	warm.Header.Set("X-API-TOKEN", testToken)
	h.ServeHTTP(w, warm) // builds the index
	req := httptest.NewRequest("GET", "/v1/surveys/4574/responses?per_page=1000&page=300", nil)
	req.Header.Set("X-API-TOKEN", testToken)
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
	reportCPU(b, cpu0)
}

// TestMillionResponses checks that a survey of a million responses stays
// lean: the index costs a few bytes per response, and lists and details
// answer quickly.
func TestMillionResponses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an index of a million responses")
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	e := newEnv(t, func(o *Options) {
		o.Surveys = []SurveySpec{{ID: 4574, Responses: 1_000_000, Seed: 1, Interval: time.Second}}
	})
	start := time.Now()
	l := e.list("per_page=1000&page=700")
	build := time.Since(start)
	if l.Total < 700_000 || len(l.Data) != 1000 {
		t.Fatalf("total %d, %d items", l.Total, len(l.Data))
	}
	start = time.Now()
	p := e.list("status=partial&per_page=1000")
	partial := time.Since(start)
	if p.Total < 70_000 {
		t.Fatalf("partial total %d", p.Total)
	}
	e.envelope(e.get("/v1/surveys/4574/responses/"+string(l.Data[500].ResponseID)), 200, nil)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	heap := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("1M responses: first list (index build) %v, partial list %v, heap +%.1f MiB", build, partial, float64(heap)/(1<<20))
	if heap > 64<<20 {
		t.Fatalf("heap grew by %d MiB for a million responses", heap>>20)
	}
	runtime.KeepAlive(e)
}
