package dirlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A second Acquire of a held folder fails naming the holder; after
// Unlock it succeeds; Held tells without taking the lock.
func TestSecondAcquireNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	first := Holder{Host: "h1", PID: 4242, Started: time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)}
	l, err := Acquire(dir, first)
	if err != nil {
		t.Fatal(err)
	}
	if held, h := Held(dir); !held || h != first {
		t.Fatalf("Held = %v %+v, want true %+v", held, h, first)
	}
	_, err = Acquire(dir, Self(time.Now()))
	var he *HeldError
	if !errors.As(err, &he) || he.Holder != first {
		t.Fatalf("second Acquire: %v, want a HeldError naming %+v", err, first)
	}
	for _, want := range []string{dir, "host h1", "pid 4242", "started 2026-11-22T05:00:00Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if held, _ := Held(dir); held {
		t.Fatal("Held after Unlock")
	}
	l2, err := Acquire(dir, Self(time.Now()))
	if err != nil {
		t.Fatalf("Acquire after Unlock: %v", err)
	}
	_ = l2.Unlock()
}
