package webhookrx

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A garbled spool.db (noise in the middle, a truncation, zeroed blocks)
// is moved aside with a WARN naming it, and the spool opens with the
// events that could be read, each one exact; new events go on after them.
// bbolt itself panics at open on these files (the crash loop of issue 32).
func TestSpoolDamagedFileIsMovedAside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"noise in the middle", func(b []byte) []byte {
			rng := rand.New(rand.NewPCG(1, 1))
			mid := len(b) / 2 &^ 4095
			for i := mid; i < mid+4096; i++ {
				b[i] = byte(rng.Uint32())
			}
			return b
		}},
		{"truncated", func(b []byte) []byte { return b[:len(b)/3] }},
		{"zero-filled block", func(b []byte) []byte {
			mid := len(b) / 3 &^ 4095
			clear(b[mid : mid+8192])
			return b
		}},
		{"zero-filled file", func(b []byte) []byte { return make([]byte, len(b)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sp, _ := openTestSpool(t, dir, 1000)
			sent := appendBatch(t, sp, 0, 600)
			if err := sp.markDone(marks(sent[:100])); err != nil {
				t.Fatal(err)
			}
			sp.close()
			path := filepath.Join(dir, dbName)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}

			var logs bytes.Buffer
			sp, seqList, err := openSpool(dir, 1000, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatalf("open a damaged spool: %v", err)
			}
			defer sp.close()
			out := logs.String()
			if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "file="+path) || !strings.Contains(out, "moved_to="+path+".damaged-") ||
				!strings.Contains(out, "polling and reconcile") {
				t.Fatalf("the WARN does not name the file, where it went and what recovers the loss:\n%s", out)
			}
			aside, _ := filepath.Glob(path + ".damaged-*")
			if len(aside) != 1 {
				t.Fatalf("damaged file kept as %v", aside)
			}
			byID := map[string]Event{}
			for _, ev := range sent[100:] {
				byID[ev.ID] = ev
			}
			var last uint64
			for _, seq := range seqList {
				ev, err := sp.read(seq)
				if err != nil {
					t.Fatal(err)
				}
				want, ok := byID[ev.ID]
				if !ok || want.Seq != ev.Seq || !bytes.Equal(want.Body, ev.Body) || !want.ReceivedAt.Equal(ev.ReceivedAt) {
					t.Fatalf("salvaged event %d is not one that was waiting, or differs", seq)
				}
				last = max(last, seq)
			}
			t.Logf("salvaged %d of 500 waiting events; %s", len(seqList), strings.TrimSpace(out))
			more := appendN(t, sp, 1000, 3)
			if more[0].Seq <= last {
				t.Fatalf("a new event got seq %d, not after the salvaged %d", more[0].Seq, last)
			}
			sp.close()
			// The new file is sound: it opens again without a word.
			logs.Reset()
			sp2, again, err := openSpool(dir, 1000, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			defer sp2.close()
			if len(again) != len(seqList)+3 || strings.Contains(logs.String(), "damaged") {
				t.Fatalf("reopened: %d events (want %d); log:\n%s", len(again), len(seqList)+3, logs.String())
			}
		})
	}
}

// A spool the receiver runs on: damaged at rest, the receiver starts,
// takes webhooks and processes them.
func TestReceiverStartsOnDamagedSpool(t *testing.T) {
	dir := t.TempDir()
	sp, _ := openTestSpool(t, dir, 1000)
	appendBatch(t, sp, 0, 400)
	sp.close()
	path := filepath.Join(dir, dbName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	mid := len(b) / 2 &^ 4095
	for i := mid; i < mid+4096; i++ {
		b[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	p := newRecorder()
	rn := start(t, testOptions(t, dir), p, nil)
	defer func() { _ = rn.stop() }()
	if code, body, _ := post(t, rn.url, responseBody(9999), nil); code != 200 {
		t.Fatalf("post after recovery: %d %s", code, body)
	}
	waitFor(t, "the new event processed", func() bool {
		for _, ev := range p.processed() {
			if strings.Contains(string(ev.Body), fmt.Sprintf("%012X", 9999)) {
				return true
			}
		}
		return false
	})
}

// appendBatch appends n events in one commit.
func appendBatch(t *testing.T, sp *spool, from, n int) []Event {
	t.Helper()
	evs := make([]*Event, n)
	for i := range evs {
		body := []byte(responseBody(from + i))
		evs[i] = &Event{ID: bodyID(body), ReceivedAt: time.Unix(1700000000, int64(from+i)).UTC(), Body: body}
	}
	res, err := sp.append(evs, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Event, n)
	for i, ev := range evs {
		if res[i] != resAccepted {
			t.Fatalf("append %d: %v", i, res[i])
		}
		out[i] = *ev
	}
	return out
}
