package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/webhookrx"
)

// Changing the privacy rules on an existing warehouse (docs/privacy.md):
// the warehouse records the rules its data was written under. At start
// the daemon compares them with its configuration (checkPrivacyRules):
// stricter rules make it refuse, naming each change and the command that
// rewrites the data (ApplyPrivacy, surveysync privacy apply); looser ones
// apply to new data only and are recorded; a warehouse with no record gets
// one.

// configuredRules are the rules cfg configures and the hash key (nil when
// nothing is hashed).
func configuredRules(cfg *config.Config) (privacy.Rules, []byte, error) {
	o, err := policyOptions(cfg)
	if err != nil {
		return privacy.Rules{}, nil, err
	}
	return o.Rules(), o.Key, nil
}

// PrivacyStricterError is the refusal to start with rules stricter than
// those the data was written under.
type PrivacyStricterError struct {
	Where   string
	Changes privacy.Diff
	Command string // the command that applies them
}

func (e *PrivacyStricterError) Error() string {
	msg := fmt.Sprintf("privacy: the configured rules are stricter than those the data in %s was written under: %s. "+
		"Rows already written still hold what the former rules let in. Stop here and run %s: it rewrites them and records the rules; "+
		"the daemon then starts (docs/privacy.md, \"Changing the rules on an existing warehouse\")",
		e.Where, e.Changes.String(), e.Command)
	for _, c := range e.Changes {
		if c.Rule == "privacy.hash_key" {
			// A key file damaged or replaced by mistake reads as a new key:
			// privacy apply would then empty every value hashed so far.
			msg += ". If the key was not changed on purpose, do not run it: restore the former key (privacy.hash_key_file, or " +
				"SURVEYSYNC_PRIVACY__HASH_KEY) from its backup, and the daemon starts as before"
			break
		}
	}
	return msg
}

// PrivacyRecordDamagedError is the refusal to start when the record of
// the privacy rules cannot be read: whether the configured rules are
// stricter than those the data was written under is unknown.
type PrivacyRecordDamagedError struct {
	Damaged *warehouse.DamagedRecordError
	Command string // the command that applies the rules (privacy apply)
}

func (e *PrivacyRecordDamagedError) Error() string {
	return fmt.Sprintf("privacy: %v: which rules the data was written under is unknown, so the daemon cannot tell whether "+
		"the configured ones are stricter. Stop here and run %s --all: it applies every configured rule to every row "+
		"(a value already hashed is not hashed again) and records the rules again; the daemon then starts "+
		"(docs/operations.md, \"Damaged local state\")", e.Damaged, e.Command)
}

func (e *PrivacyRecordDamagedError) Unwrap() error { return e.Damaged }

// readRules reads the recorded rules (nil: none); a record that exists but
// cannot be read is a *warehouse.DamagedRecordError.
func readRules(ctx context.Context, st warehouse.PrivacyStore, where string) (*privacy.Rules, error) {
	raw, err := st.PrivacyRules(ctx)
	if err != nil || raw == nil {
		return nil, err
	}
	var r privacy.Rules
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, &warehouse.DamagedRecordError{Where: where, Err: err}
	}
	return &r, nil
}

func recordRules(ctx context.Context, st warehouse.PrivacyStore, r privacy.Rules) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := st.RecordPrivacyRules(ctx, raw); err != nil {
		return fmt.Errorf("privacy: record the rules: %w", err)
	}
	return nil
}

// checkPrivacyRules compares the configured rules with the recorded ones
// before the daemon writes anything; applyCommand is the command to name
// in a refusal.
func checkPrivacyRules(ctx context.Context, cfg *config.Config, wh warehouse.Warehouse, applyCommand string, log *slog.Logger) error {
	st := wh.Privacy()
	if st == nil {
		return nil
	}
	rules, _, err := configuredRules(cfg)
	if err != nil {
		return err
	}
	old, err := readRules(ctx, st, wh.String())
	if d := (*warehouse.DamagedRecordError)(nil); errors.As(err, &d) {
		return &PrivacyRecordDamagedError{Damaged: d, Command: applyCommand}
	}
	if err != nil {
		return err
	}
	if old == nil {
		has, err := st.HasData(ctx)
		if err != nil {
			return err
		}
		if has {
			log.Warn("privacy: this warehouse has no record of the privacy rules its data was written under (written by a surveysync before the record existed): "+
				"the rules configured now are recorded, and rows written earlier may predate them; to apply them to every row, run "+applyCommand+" --all",
				"warehouse", wh.String())
		}
		return recordRules(ctx, st, rules)
	}
	diff := privacy.Compare(*old, rules)
	if len(diff) == 0 {
		return nil
	}
	if s := diff.Stricter(); len(s) > 0 {
		return &PrivacyStricterError{Where: wh.String(), Changes: s, Command: applyCommand}
	}
	log.Info("privacy: rules loosened; they apply to data written from now on, rows already written keep what the former rules let in",
		"changes", diff.String())
	return recordRules(ctx, st, rules)
}

// PrivacyApplyReport says what ApplyPrivacy did.
type PrivacyApplyReport struct {
	Changes  privacy.Diff     // from the recorded rules (all of them with All)
	Rows     map[string]int64 // rows changed or removed per table; "objects": files deleted
	Rewrote  bool             // data was rewritten (false: only the record)
	Recorded bool             // the rules were recorded
	NoRecord bool             // the warehouse had no record (and All was not asked)
	Took     time.Duration
}

// PrivacyApplyOptions are surveysync privacy apply's flags.
type PrivacyApplyOptions struct {
	// All applies every configured rule to every row, as if the data had
	// been written with no rule (a warehouse written before the rules were
	// recorded).
	All bool
	// DryRun lists the changes and writes nothing.
	DryRun bool
}

// ErrDaemonRunning is ApplyPrivacy's refusal while a daemon writes the
// warehouse.
var ErrDaemonRunning = errors.New("a surveysync daemon is running on this warehouse: stop it first (privacy apply rewrites what it would be writing), then run the command again")

// ApplyPrivacy is surveysync privacy apply: it rewrites the data written
// under the recorded rules as the configured ones say (a field newly
// dropped is emptied, one newly hashed hashed, a newly dropped question's
// answers and uploaded files removed, values hashed with a former key
// emptied), then records the configured rules. It refuses while a daemon
// runs (the Parquet folder's lock, a live lease on the ClickHouse
// database). Idempotent: a run killed midway is finished by the next.
func ApplyPrivacy(ctx context.Context, cfg *config.Config, o PrivacyApplyOptions, log *slog.Logger) (PrivacyApplyReport, error) {
	var rep PrivacyApplyReport
	start := time.Now()
	// The Parquet folder is locked before the warehouse opens (opening it
	// tidies files a running daemon may be writing).
	if !o.DryRun {
		lock, err := lockDataDir(cfg, log)
		if err != nil {
			return rep, fmt.Errorf("%w (%w)", ErrDaemonRunning, err)
		}
		defer func() { _ = lock.Unlock() }()
	}
	wh, err := openWarehouse(ctx, cfg, log, prometheus.NewRegistry(), !o.DryRun)
	if err != nil {
		return rep, err
	}
	defer wh.Close()
	st := wh.Privacy()
	if st == nil {
		return rep, fmt.Errorf("%s cannot record privacy rules", wh.String())
	}
	if !o.DryRun {
		if l := wh.Leases(); l != nil && !cfg.HA.Enabled() {
			live, err := l.Live(ctx, LeaseExpiry)
			if err != nil {
				return rep, err
			}
			if len(live) > 0 {
				return rep, fmt.Errorf("%w (host %s, pid %d, last heartbeat %s ago)", ErrDaemonRunning, live[0].Host, live[0].PID, RoundDuration(live[0].HeartbeatAge))
			}
		}
	}
	rules, key, err := configuredRules(cfg)
	if err != nil {
		return rep, err
	}
	old, err := readRules(ctx, st, wh.String())
	if d := (*warehouse.DamagedRecordError)(nil); errors.As(err, &d) && o.All {
		// --all assumes no rule was applied: the record is not needed, and
		// is replaced at the end.
		log.Warn("privacy apply: the record of the rules is damaged; --all applies every rule and records them again", "err", d)
		err = nil
	}
	if err != nil {
		var d *warehouse.DamagedRecordError
		if errors.As(err, &d) {
			return rep, &PrivacyRecordDamagedError{Damaged: d, Command: "surveysync privacy apply"}
		}
		return rep, err
	}
	switch {
	case o.All:
		all := privacy.Options{}.Rules()
		old = &all
	case old == nil:
		rep.NoRecord = true
		if o.DryRun {
			return rep, nil
		}
		rep.Recorded = true
		return rep, recordRules(ctx, st, rules)
	}
	rep.Changes = privacy.Compare(*old, rules)
	delta := privacy.NewDelta(*old, rules, key)
	if o.DryRun {
		return rep, nil
	}
	if !delta.Empty() {
		var deleteObjects func(context.Context, []files.FileRef) error
		if cfg.Files.Enabled {
			bs, err := openBlobStore(ctx, cfg)
			if err != nil {
				return rep, fmt.Errorf("files.url: %w", err)
			}
			defer bs.Close()
			deleteObjects = func(ctx context.Context, refs []files.FileRef) error {
				for _, r := range refs {
					if err := bs.Delete(ctx, r.Key()); err != nil {
						return fmt.Errorf("delete the file %s of a dropped question: %w", bs.ObjectURL(r.Key()), err)
					}
				}
				return nil
			}
		}
		log.Info("privacy apply: rewriting the data written under the former rules", "changes", rep.Changes.String())
		rep.Rows, err = st.ApplyPrivacy(ctx, delta, deleteObjects)
		rep.Rewrote = true
		if err != nil {
			return rep, err
		}
	}
	// The webhook spool: the events waiting there get the same change, and
	// its file is rewritten without the free pages that keep what was
	// deleted (docs/privacy.md, "The webhook spool").
	if cfg.Webhooks.Enabled && cfg.Webhooks.SpoolDir != "" {
		rules, err := spoolRules(cfg)
		if err != nil {
			return rep, err
		}
		policy, err := newPolicy(cfg)
		if err != nil {
			return rep, err
		}
		// The change, then the rules themselves (a body spooled before the
		// spool applied them), idempotently.
		rewrite := func(body []byte) []byte { return policy.Idempotent().WebhookBody(delta.WebhookBody(body)) }
		n, err := webhookrx.RewriteSpool(cfg.Webhooks.SpoolDir, rewrite, rules, log.With("component", "webhooks"))
		if err != nil {
			return rep, fmt.Errorf("privacy apply: the webhook spool: %w", err)
		}
		if n > 0 {
			if rep.Rows == nil {
				rep.Rows = map[string]int64{}
			}
			rep.Rows["webhook_spool"] = int64(n)
		}
	}
	// Only now: a run killed before finds the former rules and goes on.
	if err := recordRules(ctx, st, rules); err != nil {
		return rep, err
	}
	rep.Recorded = true
	rep.Took = time.Since(start)
	return rep, nil
}
