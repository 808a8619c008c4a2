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

	"github.com/surveysync/surveysync/internal/diskfault"
	"github.com/surveysync/surveysync/pipeline"
)

// A truncated or torn state file is set aside with a log line naming it
// and what is rebuilt; loading and saving go on from an empty state.
func TestCorruptStateFileIsSetAside(t *testing.T) {
	for _, name := range []string{statesFile, surveysFile} {
		t.Run(name, func(t *testing.T) {
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
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, raw[:len(raw)/2], 0o600); err != nil { // truncated
				t.Fatal(err)
			}
			states, serr := s.LoadStates(ctx)
			surveys, verr := s.LoadSurveys(ctx)
			if serr != nil || verr != nil {
				t.Fatalf("load after truncation: %v, %v", serr, verr)
			}
			if name == statesFile && len(states) != 0 || name == surveysFile && len(surveys) != 0 {
				t.Fatalf("the truncated file's content was used: %v %v", states, surveys)
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("set-aside files: %v", aside)
			}
			if got, _ := os.ReadFile(aside[0]); !bytes.Equal(got, raw[:len(raw)/2]) {
				t.Error("the set-aside file does not hold the corrupt content")
			}
			if !strings.Contains(logs.String(), "corrupt") || !strings.Contains(logs.String(), aside[0]) {
				t.Errorf("no log line naming the set-aside file:\n%s", logs.String())
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
