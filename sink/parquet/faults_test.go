package parquet

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/testkit/diskfault"
	"github.com/surveysync/surveysync/pipeline"
)

// garblings are the damage done to local files in tests: a copy cut
// short, noise over the middle (a disk fault), zeros over the whole (a
// crash before the blocks were written).
var garblings = []struct {
	name string
	fn   func([]byte) []byte
}{
	{"cut in half", func(b []byte) []byte { return b[:len(b)/2] }},
	{"noise in the middle", func(b []byte) []byte {
		b = append([]byte(nil), b...)
		for i := len(b) / 3; i < len(b)*2/3; i++ {
			b[i] = byte(i*7919 + 13)
		}
		return b
	}},
	{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }},
}

// garble damages the file at path as g does.
func garble(t *testing.T, path string, g func([]byte) []byte) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := g(raw)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	return bad
}

// A damaged state file is moved aside with a warning naming it and what is
// lost; loading and saving go on from an empty state.
func TestDamagedStateFileIsMovedAside(t *testing.T) {
	for _, name := range []string{statesFile, surveysFile} {
		for _, g := range garblings {
			t.Run(name+"/"+g.name, func(t *testing.T) {
				dir := t.TempDir()
				ctx := context.Background()
				var logs bytes.Buffer
				s, err := Open(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
				if err := s.SaveStates(ctx, []pipeline.StreamState{{SurveyID: 1, Stream: pipeline.StreamCompleted, Watermark: t0, Synced: 5}}); err != nil {
					t.Fatal(err)
				}
				if err := s.SaveSurveys(ctx, []pipeline.SurveyInfo{{SurveyID: 1, Name: "x", FirstSeen: t0, LastSeen: t0}}); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, stateDirName, name)
				bad := garble(t, path, g.fn)
				states, serr := s.LoadStates(ctx)
				surveys, verr := s.LoadSurveys(ctx)
				if serr != nil || verr != nil {
					t.Fatalf("load after the damage: %v, %v", serr, verr)
				}
				if name == statesFile && len(states) != 0 || name == surveysFile && len(surveys) != 0 {
					t.Fatalf("the damaged file's content was used: %v %v", states, surveys)
				}
				aside, _ := filepath.Glob(path + ".damaged-*")
				if len(aside) != 1 {
					t.Fatalf("moved-aside files: %v", aside)
				}
				if got, _ := os.ReadFile(aside[0]); !bytes.Equal(got, bad) {
					t.Error("the moved-aside file does not hold the damaged content")
				}
				log := logs.String()
				for _, want := range []string{"level=WARN", "is damaged", "file=" + path, aside[0], "lost="} {
					if !strings.Contains(log, want) {
						t.Errorf("the log lacks %q:\n%s", want, log)
					}
				}
				// It is rebuilt by the next save.
				if err := s.SaveStates(ctx, []pipeline.StreamState{{SurveyID: 2, Stream: pipeline.StreamCompleted, Watermark: t0}}); err != nil {
					t.Fatal(err)
				}
				if err := s.SaveSurveys(ctx, []pipeline.SurveyInfo{{SurveyID: 2, Name: "y", FirstSeen: t0, LastSeen: t0}}); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(path); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// Ping fails while the folder cannot take a write (full or read-only) and
// succeeds again once it can.
func TestPingReflectsWritability(t *testing.T) {
	d := diskfault.New(t, 1)
	w, err := OpenWarehouse(Options{Dir: d.Path})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	if err := w.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	d.Break(t)
	if err := w.Ping(ctx); err == nil {
		t.Fatalf("Ping on a %s folder: nil", d.Kind())
	} else {
		t.Logf("Ping (%s): %v", d.Kind(), err)
	}
	d.Heal(t)
	if err := w.Ping(ctx); err != nil {
		t.Fatalf("Ping once writable again: %v", err)
	}
}
