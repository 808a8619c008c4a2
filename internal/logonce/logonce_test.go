package logonce

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// 1,500 failures of one cause within a second (a revoked token, one per
// queued response) make one line, then one line per back-off step with the
// count; another cause is logged on its own.
func TestOneLinePerStepWithCount(t *testing.T) {
	var out strings.Builder
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(slog.New(slog.NewTextHandler(&out, nil)), time.Second, time.Minute, func() time.Time { return now })
	for i := range 1500 {
		l.Warn("fetch response failed; it will be read again",
			fmt.Errorf("get_response survey 4574 response 0a1b2c3d-0000-4000-8000-%012d: 401 Invalid API token (request %d)", i, i),
			"response_id", i)
		now = now.Add(time.Millisecond / 2)
	}
	if n := strings.Count(out.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d lines for 1,500 failures in 0.75 s, want 1:\n%s", n, out.String())
	}
	now = now.Add(300 * time.Millisecond) // past the first step
	l.Warn("fetch response failed; it will be read again", errors.New("get_response survey 4574 response 77: 401 Invalid API token (request 9)"))
	if !strings.Contains(out.String(), "repeated=1500") {
		t.Fatalf("the second line does not count:\n%s", out.String())
	}
	l.Warn("fetch response failed; it will be read again", errors.New("get_response survey 4574 response 77: 503 Service unavailable"))
	if n := strings.Count(out.String(), "level=WARN"); n != 3 {
		t.Fatalf("%d lines, want 3 (another cause)", n)
	}
	// A cause quiet for a step starts over.
	now = now.Add(time.Hour)
	l.Warn("fetch response failed; it will be read again", errors.New("get_response survey 1 response 2: 401 Invalid API token (request 3)"))
	if n := strings.Count(out.String(), "level=WARN"); n != 4 || strings.Count(out.String(), "repeated=") != 1 {
		t.Fatalf("after a quiet hour:\n%s", out.String())
	}
}

// Occurrences that come in bursts further apart than the step (eight
// streams failing together at each of their back-off steps) make one line
// per burst, and each line counts the burst before it.
func TestBurstsCarryTheirCount(t *testing.T) {
	var out strings.Builder
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New(slog.New(slog.NewTextHandler(&out, nil)), time.Second, time.Minute, func() time.Time { return now })
	for _, gap := range []time.Duration{0, 2 * time.Second, 4 * time.Second} {
		now = now.Add(gap)
		for s := range 8 {
			l.Log(slog.LevelInfo, "poll cycle failed", errors.New("token rejected at 12:00:01"), "stream", s, "error", "x")
		}
	}
	if n := strings.Count(out.String(), "level=INFO"); n != 3 {
		t.Fatalf("%d lines for 3 bursts, want 3:\n%s", n, out.String())
	}
	if strings.Count(out.String(), "repeated=8") != 2 || strings.Contains(out.String(), " err=") {
		t.Fatalf("each line after the first counts the burst before it, and Log adds no err:\n%s", out.String())
	}
}

func TestMask(t *testing.T) {
	a := Mask("get_response survey 4574 response da45e3a1-1c3e-4b6e-9f5a-0d2c7c1b2a3e: 401 (request 12)")
	b := Mask("get_response survey 17 response 00000000-0000-4000-8000-000000000001: 401 (request 9)")
	if a != b {
		t.Fatalf("%q != %q", a, b)
	}
	if Mask("connection reset by peer") != "connection reset by peer" {
		t.Fatal(Mask("connection reset by peer"))
	}
}
