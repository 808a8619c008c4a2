package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStep(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 100, 200, 400, 800, 1000, 1000}
	for n, w := range want {
		if got := p.Step(n); got != w*time.Millisecond {
			t.Errorf("Step(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := (Policy{Initial: time.Second}).Step(200); got <= 0 {
		t.Errorf("Step without Max overflowed: %v", got)
	}
	if got := (Policy{}).Step(3); got != 0 {
		t.Errorf("zero policy: %v", got)
	}
}

func TestDelayWithinHalfAndWholeStep(t *testing.T) {
	p := Policy{Initial: time.Second, Max: time.Minute}
	for n := 1; n < 10; n++ {
		s := p.Step(n)
		for range 200 {
			if d := p.Delay(n); d < s/2 || d > s {
				t.Fatalf("Delay(%d) = %v outside [%v, %v]", n, d, s/2, s)
			}
		}
	}
}

func TestSleepStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("Sleep did not return at cancel")
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
