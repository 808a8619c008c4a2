package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// simFault installs a fault through the emulator's control API.
func simFault(base, body string) error {
	resp, err := http.Post(base+"/_sim/faults", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("emulator fault %s: %s %s", body, resp.Status, b)
	}
	return nil
}

// surveyIDs lists the ids of every response of the surveys (every page of
// each survey's list), through the emulator's API as any client would: it
// also warms the emulator (which generates a survey's responses on first
// use), so that neither the ceiling nor the daemon pays for that.
func surveyIDs(ctx context.Context, base, token string, surveys []int64) ([]string, error) {
	c := &http.Client{}
	var ids []string
	for _, sid := range surveys {
		for page := 1; ; page++ {
			body, err := getBody(ctx, c, token, fmt.Sprintf("%s/v1/surveys/%d/responses?per_page=1000&page=%d", base, sid, page))
			if err != nil {
				return nil, err
			}
			var list struct {
				Result struct {
					Total int `json:"total"`
					Data  []struct {
						ID string `json:"response_id"`
					} `json:"data"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				return nil, fmt.Errorf("list survey %d page %d: %w", sid, page, err)
			}
			for _, d := range list.Result.Data {
				ids = append(ids, fmt.Sprintf("%d/%s", sid, d.ID))
			}
			if len(list.Result.Data) < 1000 || page*1000 >= list.Result.Total {
				break
			}
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("the surveys %v list no response", surveys)
	}
	return ids, nil
}

func getBody(ctx context.Context, c *http.Client, token, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-TOKEN", token)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}

// bareCeiling is the rate at which a bare keep-alive client gets response
// details from the emulator: conc goroutines, each on its own kept-alive
// connection, GET a detail (ids: the surveys' responses in list order,
// spread over the goroutines), read the body to the end, next, for d. What a
// caller that does nothing with the answers can get: the emulator's serving
// ceiling.
func bareCeiling(ctx context.Context, base, token string, ids []string, conc int, d time.Duration) (float64, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var n atomic.Int64
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				i := int(next.Add(1)-1) % len(ids)
				sid, id, _ := strings.Cut(ids[i], "/")
				if _, err := getBody(ctx, c, token, fmt.Sprintf("%s/v1/surveys/%s/responses/%s", base, sid, id)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// detailRate follows the emulator's count of get_response calls while the
// daemon backfills: the rate from the first call seen to the last increase
// (start-up and the tail after the last detail left out).
type detailRate struct {
	first, last   time.Time
	firstN, lastN int64
	timeline      []int64 // calls per half second since the first
	lists         []int64 // list calls in the same seconds
	secN, secL    int64
	base          int64 // get_response calls when the daemon started
	based         bool
	sec           time.Time
}

func (r *detailRate) sample(base string) {
	resp, err := http.Get(base + "/_sim/calls")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var calls map[string]int64
	if json.NewDecoder(resp.Body).Decode(&calls) != nil {
		return
	}
	n, now := calls["get_response"], time.Now()
	if !r.based {
		// Calls before the daemon's (the ceiling's) are not its own.
		r.base, r.based = n, true
		return
	}
	switch {
	case n == r.base:
	case r.first.IsZero():
		r.first, r.firstN, r.last, r.lastN = now, n, now, n
		r.sec, r.secN, r.secL = now, n, calls["list_responses"]
	case n > r.lastN:
		r.last, r.lastN = now, n
	}
	if !r.sec.IsZero() && now.Sub(r.sec) >= 500*time.Millisecond {
		r.timeline = append(r.timeline, n-r.secN)
		r.lists = append(r.lists, calls["list_responses"]-r.secL)
		r.sec, r.secN, r.secL = now, n, calls["list_responses"]
	}
}

func (r *detailRate) rate() float64 {
	if d := r.last.Sub(r.first).Seconds(); d > 0 {
		return float64(r.lastN-r.firstN) / d
	}
	return 0
}

func (r *detailRate) String() string {
	return fmt.Sprintf("%d in %s = %.0f/s (each half second: %v; list calls in those: %v)", r.lastN-r.firstN, r.last.Sub(r.first).Round(time.Millisecond), r.rate(), r.timeline, r.lists)
}

// heapProfile saves the daemon's heap profile (metrics.pprof on).
func heapProfile(port int, path string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", port))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
}

// memPeaks follows the daemon's Go memory gauges (its /metrics, metrics.pprof
// runs keep the listener on): the peak of each, to tell the heap from the
// rest of the resident set.
type memPeaks map[string]float64

func (m memPeaks) sample(port int) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "go_memstats_") {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes", "go_memstats_next_gc_bytes",
			"go_memstats_sys_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_heap_sys_bytes":
			var v float64
			if _, err := fmt.Sscan(val, &v); err == nil && v > m[name] {
				m[name] = v
				if name == "go_memstats_heap_alloc_bytes" {
					m["peak_at_unix"] = float64(time.Now().UnixMilli()) / 1000
				}
			}
		}
	}
}

func (m memPeaks) String() string {
	var parts []string
	for _, k := range []string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_memstats_next_gc_bytes", "go_memstats_heap_sys_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes"} {
		parts = append(parts, fmt.Sprintf("%s %.1f MB", strings.TrimPrefix(k, "go_memstats_"), m[k]/1e6))
	}
	parts = append(parts, "heap_alloc's peak at "+time.UnixMilli(int64(m["peak_at_unix"]*1000)).UTC().Format("15:04:05.000"))
	return strings.Join(parts, ", ")
}
