package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/daemon"
)

const privacyUsage = `usage: surveysync privacy apply [--config FILE] [--all] [--dry-run]
`

// privacyCLI is surveysync privacy (docs/privacy.md, "Changing the rules
// on an existing warehouse").
func privacyCLI(ctx context.Context, rest []string, stdout, stderr io.Writer) int {
	if len(rest) == 0 {
		fmt.Fprint(stderr, privacyUsage)
		return exitUsage
	}
	if isHelp(rest[0]) {
		fmt.Fprint(stdout, privacyUsage)
		return exitOK
	}
	if rest[0] != "apply" {
		fmt.Fprintf(stderr, "surveysync privacy: unknown subcommand %q\n%s", rest[0], privacyUsage)
		return exitUsage
	}
	var o daemon.PrivacyApplyOptions
	cfg, _, code := load(command{name: "privacy apply", args: "[--all] [--dry-run]", noAPI: true,
		about: "Apply the configured privacy rules to the data already written: a field newly dropped is emptied, one newly hashed is hashed, a newly dropped question's answers and uploaded files are removed, values hashed with a former key are emptied — in every table (ClickHouse) or file (Parquet), the feed ledger and the webhook log — then the rules are recorded and run starts again. Stop the daemon first. Idempotent: run it again after an interruption.",
		extra: func(fs *pflag.FlagSet) {
			fs.BoolVar(&o.All, "all", false, "apply every rule to every row, as if the data had been written with no rule (a warehouse written before the rules were recorded)")
			fs.BoolVar(&o.DryRun, "dry-run", false, "print the changes from the recorded rules, change nothing")
		}}, rest[1:], stdout, stderr)
	if cfg == nil {
		return code
	}
	log := daemon.NewLogger(cfg, stderr)
	rep, err := daemon.ApplyPrivacy(ctx, cfg, o, log)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync privacy apply:", err)
		if errors.Is(err, daemon.ErrDaemonRunning) {
			return exitFail
		}
		if rep.Rewrote {
			fmt.Fprintln(stderr, "surveysync privacy apply: the rules are not recorded yet: run the same command again to finish")
		}
		return exitFail
	}
	switch {
	case rep.NoRecord && o.DryRun:
		fmt.Fprintln(stdout, "no privacy rules are recorded in this warehouse: run records the configured ones (--all applies them to every row)")
		return exitOK
	case rep.NoRecord:
		fmt.Fprintln(stdout, "no privacy rules were recorded in this warehouse: the configured ones are now (rows written earlier may predate them: --all applies them to every row)")
		return exitOK
	}
	if len(rep.Changes) == 0 {
		fmt.Fprintln(stdout, "the data was written under the configured privacy rules: nothing to do")
		return exitOK
	}
	for _, c := range rep.Changes {
		kind := "applies to new data only"
		if c.Stricter {
			kind = "rewrites the data already written"
		}
		fmt.Fprintf(stdout, "  %s: %s\n", c, kind)
	}
	if o.DryRun {
		return exitOK
	}
	fmt.Fprintf(stdout, "privacy rules applied in %s: %s; the rules are recorded\n", daemon.RoundDuration(rep.Took), formatRows(rep.Rows))
	return exitOK
}

func formatRows(rows map[string]int64) string {
	if len(rows) == 0 {
		return "no row needed a change"
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, rows[k])
	}
	return "rows changed " + strings.Join(parts, " ")
}

// privacyApplyCommand is the privacy apply command with run's
// configuration flags (a refusal to start names it).
func privacyApplyCommand(runArgs []string) string {
	out := []string{"surveysync", "privacy", "apply"}
	for _, a := range runArgs {
		if a == "--exit-when-synced" || a == "--force" || strings.HasPrefix(a, "--exit-when-synced=") || strings.HasPrefix(a, "--force=") {
			continue
		}
		out = append(out, shellQuote(a))
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
