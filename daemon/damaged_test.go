package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// damages are what the tests do to a local file: cut short, noise over
// the middle, zeros over the whole.
var damages = []struct {
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

func damageFile(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(raw), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A damaged record of the privacy rules refuses the start naming the file
// and privacy apply --all, which records the rules again; then the start
// goes on.
func TestDamagedPrivacyRecordRefusesWithTheFix(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			log := slog.New(slog.DiscardHandler)
			cfg := config.Default()
			cfg.Parquet.Dir = t.TempDir()
			cfg.Privacy.HashKey = config.Secret(privKey)
			cfg.Privacy.Fields.ContactID = config.ActionHash
			open := func() warehouse.Warehouse {
				wh, err := OpenWarehouse(ctx, cfg, log, nil)
				if err != nil {
					t.Fatal(err)
				}
				return wh
			}
			wh := open()
			if err := checkPrivacyRules(ctx, cfg, wh, "APPLY", log); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.Parquet.Dir, "_state", "privacy.json")
			damageFile(t, path, d.fn)
			err := checkPrivacyRules(ctx, cfg, wh, "APPLY", log)
			var de *PrivacyRecordDamagedError
			if !errors.As(err, &de) {
				t.Fatalf("check of a damaged record: %v (%T)", err, err)
			}
			for _, want := range []string{path, "is damaged", "APPLY --all"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal lacks %q: %v", want, err)
				}
			}
			wh.Close()
			// Without --all, apply refuses too, and says --all.
			if _, err := ApplyPrivacy(ctx, cfg, PrivacyApplyOptions{}, log); !errors.As(err, &de) || !strings.Contains(err.Error(), "--all") {
				t.Errorf("privacy apply without --all: %v", err)
			}
			rep, err := ApplyPrivacy(ctx, cfg, PrivacyApplyOptions{All: true}, log)
			if err != nil || !rep.Recorded {
				t.Fatalf("privacy apply --all: %+v, %v", rep, err)
			}
			wh = open()
			defer wh.Close()
			if err := checkPrivacyRules(ctx, cfg, wh, "APPLY", log); err != nil {
				t.Errorf("check after privacy apply --all: %v", err)
			}
		})
	}
}

// A hash key that differs from the recorded one (a key file damaged or
// replaced by mistake reads so) refuses, and the refusal says to restore
// the key unless it was changed on purpose: privacy apply would empty
// every value hashed so far.
func TestChangedKeyRefusalSaysRestoreTheKey(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.Parquet.Dir = t.TempDir()
	cfg.Privacy.HashKey = config.Secret(privKey)
	cfg.Privacy.Fields.ContactID = config.ActionHash
	wh, err := OpenWarehouse(ctx, cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	if err := checkPrivacyRules(ctx, cfg, wh, "APPLY", log); err != nil {
		t.Fatal(err)
	}
	cfg.Privacy.HashKey = config.Secret(privKey[:len(privKey)/2] + strings.Repeat("x", len(privKey)/2))
	err = checkPrivacyRules(ctx, cfg, wh, "APPLY", log)
	var se *PrivacyStricterError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "restore the former key") || !strings.Contains(err.Error(), "privacy.hash_key_file") {
		t.Errorf("refusal of a changed key: %v", err)
	}
}
