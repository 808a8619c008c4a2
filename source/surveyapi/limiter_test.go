package surveyapi

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// inFlightServer answers after delay and records the peak of concurrent
// requests and every arrival time.
type inFlightServer struct {
	*bubbleServer
	cur, peak atomic.Int64
	mu        sync.Mutex
	arrivals  []time.Time
}

func newInFlightServer(t *testing.T, delay time.Duration) *inFlightServer {
	s := &inFlightServer{}
	body := responseJSON(testRID)
	s.bubbleServer = newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := s.cur.Add(1)
		for {
			p := s.peak.Load()
			if n <= p || s.peak.CompareAndSwap(p, n) {
				break
			}
		}
		s.mu.Lock()
		s.arrivals = append(s.arrivals, time.Now())
		s.mu.Unlock()
		time.Sleep(delay)
		s.cur.Add(-1)
		w.Write(body)
	})
	return s
}

func hammer(t *testing.T, c *Client, callers, calls int) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	t0 := time.Now()
	for range callers {
		wg.Go(func() {
			for range calls {
				if _, err := c.GetResponse(context.Background(), 4574, testRID); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(t0)
}

func TestLimiterConcurrencyCapUnder64Callers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newInFlightServer(t, 10*time.Millisecond)
		h := newClient(t, s.URL, s.with(func(o *Options) { o.MaxConcurrency = 8 }))
		hammer(t, h.c, 64, 5)
		if p := s.peak.Load(); p != 8 {
			t.Errorf("peak in flight at the server = %d, want exactly 8", p)
		}
		if st := h.c.Stats(); st.InFlight != 0 || st.Total != 320 || st.ConcurrencyLimit != 8 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestLimiterRateUnder64Callers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rps, callers, calls = 400.0, 64, 6
		s := newInFlightServer(t, 0)
		h := newClient(t, s.URL, s.with(func(o *Options) { o.RateLimit = rps; o.MaxConcurrency = 64 }))
		el := hammer(t, h.c, callers, calls)
		n := callers * calls
		rate := float64(n-1) / el.Seconds()
		t.Logf("%d calls in %v: %.0f req/s (limit %.0f), peak in flight %d", n, el, rate, rps, s.peak.Load())
		if rate > rps*1.05 {
			t.Errorf("rate %.0f req/s exceeds the limit %.0f", rate, rps)
		}
		// No 500 ms window holds more than its share. Arrivals can lag their
		// token (scheduling on a loaded machine) but never lead it, so allow the
		// tokens of 250 ms more.
		s.mu.Lock()
		a := append([]time.Time(nil), s.arrivals...)
		s.mu.Unlock()
		sort.Slice(a, func(i, j int) bool { return a[i].Before(a[j]) })
		j, worst := 0, 0
		for i := range a {
			for a[i].Sub(a[j]) >= 500*time.Millisecond {
				j++
			}
			worst = max(worst, i-j+1)
		}
		if limit := int(rps*0.75) + 2; worst > limit {
			t.Errorf("%d requests in one 500 ms window, limit allows %d", worst, int(rps/2))
		}
		if v := h.c.m.rateWait; v == nil {
			t.Fatal("no rate wait metric")
		}
	})
}

func TestAdaptiveLimitCancelledWaiterKeepsNoSlot(t *testing.T) {
	a := newAdaptiveLimit(1)
	if err := a.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := a.acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	a.release()
	done := make(chan error, 1)
	go func() { done <- a.acquire(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("slot lost to a cancelled waiter")
	}
	if l, n := a.snapshot(); l != 1 || n != 1 {
		t.Errorf("limit %d in flight %d", l, n)
	}
	a.release()
}

func TestAdaptiveLimitAIMD(t *testing.T) {
	a := newAdaptiveLimit(32)
	t0 := time.Now()
	a.rateLimited(t0, t0)
	// 429s to requests sent before that decrease do not halve again.
	a.rateLimited(t0.Add(-time.Millisecond), t0.Add(time.Millisecond))
	if l, _ := a.snapshot(); l != 16 {
		t.Fatalf("limit = %d, want 16", l)
	}
	for i := 0; i < 10; i++ {
		now := t0.Add(time.Duration(i+2) * time.Second)
		a.rateLimited(now, now)
	}
	if l, _ := a.snapshot(); l != 1 {
		t.Fatalf("limit = %d, want the floor 1", l)
	}
	for range 1000 {
		a.success()
	}
	if l, _ := a.snapshot(); l != 32 {
		t.Fatalf("limit = %d after successes, want 32", l)
	}
}

// A 429 slows everyone: the limit halves and no caller sends before the
// Retry-After, whatever it was doing.
func TestLimiter429SlowsAllCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var first atomic.Bool
		first.Store(true)
		var mu sync.Mutex
		var after []time.Time
		var at429 time.Time
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			if first.Swap(false) {
				mu.Lock()
				at429 = time.Now()
				mu.Unlock()
				w.Header().Set("Retry-After", "1")
				writeJSON(w, 429, errorBody("req-Too", 429, "slow down"))
				return
			}
			mu.Lock()
			after = append(after, time.Now())
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			w.Write(responseJSON(testRID))
		})
		h := newClient(t, s.URL, s.with(func(o *Options) { o.MaxConcurrency = 16 }))
		// One call meets the 429 first; 63 callers pile in while it waits.
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
				t.Error(err)
			}
		})
		for first.Load() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		if l := h.c.Stats().ConcurrencyLimit; l != 8 {
			t.Errorf("limit after a 429 = %d, want 8", l)
		}
		hammer(t, h.c, 63, 2)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, a := range after {
			if a.Sub(at429) < 950*time.Millisecond {
				t.Fatalf("a request went out %v after the 429", a.Sub(at429))
			}
		}
	})
}
