// Command surveysync keeps a ClickHouse warehouse (or Parquet files) in sync
// with the survey service, copies uploaded files to object storage, and pushes
// contacts from feeds into distribution channels.
//
//	surveysync run [--config FILE] [--set key=value]... [--exit-when-synced] [--force]
//	surveysync doctor [--config FILE]
//	surveysync status [--config FILE]
//	surveysync query [--config FILE] [--survey ID] [--sample N]
//	surveysync config print [--config FILE]
//	surveysync feed run NAME [--dry-run] [--config FILE]
//	surveysync feed uncertain NAME | feed resolve NAME --as pushed|retry KEY...
//	surveysync erase --survey S --response ID | --contact ID
//	surveysync privacy apply [--all] [--dry-run]
//	surveysync healthcheck [--ready] [--url URL]
//	surveysync version
//
// With no configuration at all, run starts the built-in emulator of the
// survey service and syncs it into Parquet files under ./data.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runCLI(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `surveysync keeps ClickHouse (or Parquet files) in sync with the survey service.

Usage:
  surveysync run [--config FILE] [--set key=value]... [--exit-when-synced] [--force]
  surveysync doctor [--config FILE]          check token, surveys, ClickHouse, object store, listeners, feeds
  surveysync status [--config FILE]          watermark, lag, progress and errors per survey and stream
  surveysync query [--config FILE]           look at the Parquet output: current rows per survey, a sample
  surveysync config print [--config FILE]    the effective configuration, secrets masked
  surveysync feed run NAME [--dry-run]       run a feed once (--dry-run: what it would push, calling nothing)
  surveysync feed uncertain NAME             rows whose push outcome is unknown after a crash
  surveysync feed resolve NAME --as pushed|retry KEY...   settle them (daemon stopped)
  surveysync views [--refresh] [--columns] [--survey ID]...   the wide views survey_<id> (ClickHouse): list, or re-create
  surveysync resync --survey ID [--from DATE] [--to DATE]   read a survey's responses of a range again and write them as new versions
  surveysync verify [--survey ID]... [--deep] [--repair] [--json]   compare the service with the warehouse per survey and stream (exit 1 when they differ)
  surveysync export --survey ID [--output FILE] [--since TIME] [--bom] [--table T]   a survey's wide view (or long table) as CSV or Parquet (from ClickHouse, else the Parquet files)
  surveysync erase --survey S --response ID | --contact ID   erase responses physically, audited (docs/privacy.md)
  surveysync privacy apply [--all] [--dry-run]   apply changed privacy rules to the data already written (docs/privacy.md)
  surveysync copy-from HOST:PORT [--from-database DB]   copy a single-node database into the configured ClickHouse (a cluster)
  surveysync healthcheck [--ready]           exit 0 if the daemon on this machine answers /healthz (/readyz)
  surveysync version

Run 'surveysync COMMAND --help' for a command's flags.

With no --config and no SURVEYSYNC_* variables, run starts the built-in
emulator of the survey service and writes Parquet files under ./data.
`

// exit codes
const (
	exitOK     = 0
	exitFail   = 1
	exitUsage  = 2
	exitConfig = 3
)

// command describes a subcommand for its --help and its flags.
type command struct {
	name  string // "feed run"
	args  string // what follows the name in the usage line: "NAME [--dry-run]"
	about string // one line
	// configFlags are the named configuration flags (config.RegisterFlags)
	// the command offers besides --config and --set; nil: all of them.
	configFlags []string
	positional  int // number of positional arguments it requires (min)
	extra       func(*pflag.FlagSet)
	// noAPI: the command never calls the survey service, so it needs
	// neither api.token nor api.user_agent (config.WithoutAPI).
	noAPI bool
	// reload, when set, receives a function that loads the configuration
	// again from the same file, environment and flags (run's SIGHUP).
	reload *func() (*config.Config, error)
}

// Flags that matter to commands that only read the sink's state.
var sinkFlags = []string{"clickhouse-addr", "parquet-dir", "log-level", "log-format"}

func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "--version":
		fmt.Fprintln(stdout, versionString())
		return exitOK
	case "healthcheck":
		return healthcheck(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		if len(rest) > 0 {
			// surveysync help run == surveysync run --help
			return runCLI(ctx, append(rest, "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	case "config":
		if len(rest) == 0 || (rest[0] != "print" && !isHelp(rest[0])) {
			fmt.Fprintln(stderr, "usage: surveysync config print [--config FILE]")
			return exitUsage
		}
		if isHelp(rest[0]) {
			rest = []string{"print", "--help"}
		}
		cfg, _, code := load(command{name: "config print", about: "Print the effective configuration (defaults, file, SURVEYSYNC_* variables, flags), secrets masked."},
			rest[1:], stdout, stderr)
		if cfg == nil {
			return code
		}
		if err := cfg.Print(stdout); err != nil {
			fmt.Fprintln(stderr, "surveysync:", err)
			return exitFail
		}
		return exitOK
	case "run":
		var fl runFlags
		var reload func() (*config.Config, error)
		cfg, _, code := load(command{name: "run", reload: &reload, about: "Sync the configured surveys into ClickHouse (or Parquet files), receive webhooks, run the feeds; with no configuration, a demo against the built-in emulator.",
			extra: func(fs *pflag.FlagSet) {
				fs.BoolVar(&fl.exitWhenSynced, "exit-when-synced", false, "stop once every survey is caught up (demo, one-shot backfill); exits 1 if a survey cannot be read, or at once if the warehouse or the service does not answer")
				fs.BoolVar(&fl.force, "force", false, "start although another daemon's lease on the ClickHouse database is live (you know it is gone; docs/operations.md)")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		fl.reload = reload
		fl.privacyApply = privacyApplyCommand(rest)
		return runDaemon(ctx, cfg, fl, stdout, stderr)
	case "doctor":
		cfg, _, code := load(command{name: "doctor", about: "Check what run needs: the API token, every survey id, the sink, the object store, every listener, every feed source. Exits 1 if a check fails."},
			rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return doctor(ctx, cfg, stdout)
	case "status":
		cfg, _, code := load(command{name: "status", about: "Print the sync state the daemon saved in the sink: per survey and stream, watermark, lag, backfill progress, last error.",
			configFlags: sinkFlags, noAPI: true}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return status(ctx, cfg, stdout, stderr)
	case "query", "inspect":
		var q queryFlags
		cfg, _, code := load(command{name: cmd, about: "Look at the Parquet output with no other tool: current responses (latest version, deleted excluded) per survey and status, and a sample.",
			configFlags: []string{"parquet-dir", "log-level", "log-format"}, noAPI: true,
			extra: func(fs *pflag.FlagSet) {
				fs.Int64Var(&q.survey, "survey", 0, "only this survey id")
				fs.IntVar(&q.sample, "sample", 5, "print this many current responses (0: none)")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return query(ctx, cfg, q, stdout, stderr)
	case "feed":
		return feedCLI(ctx, rest, stdout, stderr)
	case "erase":
		return eraseCLI(ctx, rest, stdout, stderr)
	case "privacy":
		return privacyCLI(ctx, rest, stdout, stderr)
	case "views":
		var f viewsFlags
		cfg, _, code := load(command{name: "views", configFlags: sinkFlags,
			about: "List the wide views survey_<id> (one row per response, one column per question; docs/schema.md) with their number of question columns. The daemon keeps them current; --refresh records the columns of every question already answered in the warehouse and replaces the views (a warehouse filled by an older surveysync).",
			extra: func(fs *pflag.FlagSet) {
				fs.Int64SliceVar(&f.surveys, "survey", nil, "only these survey ids (default: every survey with responses)")
				fs.BoolVar(&f.refresh, "refresh", false, "record the columns of every answered question and replace the views")
				fs.BoolVar(&f.columns, "columns", false, "print each column: name, type, question id, variable, title")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return views(ctx, cfg, f, stdout, stderr)
	case "export":
		var f exportFlags
		cfg, _, code := load(command{name: "export", configFlags: sinkFlags,
			about: "Write a survey's wide view (one row per current response, one column per question; docs/schema.md) as CSV or Parquet, streamed: memory does not grow with the survey. From ClickHouse's view survey_<id>, or with no clickhouse.addr from the Parquet sink's files (--parquet-dir). CSV: arrays as JSON, NULL empty, times UTC; Parquet: typed columns, arrays as lists.",
			extra: func(fs *pflag.FlagSet) {
				fs.Int64Var(&f.survey, "survey", 0, "the survey id (required)")
				fs.StringVar(&f.format, "format", "csv", "csv or parquet")
				fs.StringVarP(&f.output, "output", "o", "", "the file to write (default: standard output)")
				fs.StringVar(&f.since, "since", "", "only responses read from the service at or after this time (2006-01-02 or RFC 3339): an increment")
				fs.BoolVar(&f.bom, "bom", false, "start with a UTF-8 byte order mark (for Excel)")
				fs.StringVar(&f.table, "table", "wide", "wide (one row per response), or a long table: responses, answers")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return export(ctx, cfg, f, stdout, stderr)
	case "resync":
		var f resyncFlags
		cfg, _, code := load(command{name: "resync",
			about: "Read a survey's responses completed (partial ones: started) in [--from, --to) again and write each as a new version (the *_current views then show the service's answer). A running daemon (answering on metrics.listen) queues the job; otherwise this process runs it and exits. The job is saved first: interrupted, the next run or resync finishes it.",
			extra: func(fs *pflag.FlagSet) {
				fs.Int64Var(&f.survey, "survey", 0, "the survey id (required)")
				fs.StringVar(&f.from, "from", "", "the range's start, 2006-01-02 (UTC) or RFC 3339 (default: sync.backfill_from)")
				fs.StringVar(&f.to, "to", "", "the range's end, excluded (default: now)")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return resync(ctx, cfg, f, stdout, stderr)
	case "verify":
		var f verifyFlags
		cfg, _, code := load(command{name: "verify",
			about: "Compare, for every configured survey (or each --survey) and stream, what the service lists with what the warehouse holds as current: SERVICE, WAREHOUSE, MISSING (listed, not current in the warehouse), EXTRA (current, not listed), and with --deep CONTENT (current rows that differ from a fresh read of the detail: one API call per response). Read-only, safe beside a running daemon. --repair reads what differs again (through the running daemon when one answers on metrics.listen, else in this process) and verifies again. Exit status: 0 nothing differs, 1 something does, 2 it could not verify.",
			extra: func(fs *pflag.FlagSet) {
				fs.Int64SliceVar(&f.surveys, "survey", nil, "verify this survey only (repeatable; default: every survey the daemon syncs)")
				fs.BoolVar(&f.deep, "deep", false, "also read every current response again and compare its rows (one detail call each: for audits)")
				fs.BoolVar(&f.repair, "repair", false, "read what differs again, then verify again")
				fs.BoolVar(&f.json, "json", false, "one JSON object per line per survey and stream")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		return verifyCmd(ctx, cfg, f, stdout, stderr)
	case "copy-from":
		var from copyFlags
		cfg, pos, code := load(command{name: "copy-from", args: "HOST:PORT", positional: 1, configFlags: sinkFlags, noAPI: true,
			about: "Copy every table of a surveysync database on another ClickHouse server (the single node a deployment outgrew) into the configured one (a cluster: rows go to their shards). Stop the daemon first; surveysync reads the source over its own connection (it must reach HOST:PORT); the source password comes from SURVEYSYNC_COPY_FROM_PASSWORD and never goes into a query.",
			extra: func(fs *pflag.FlagSet) {
				fs.StringVar(&from.database, "from-database", "surveysync", "the source database")
				fs.StringVar(&from.user, "from-user", "default", "the source's ClickHouse user")
				fs.BoolVar(&from.secure, "from-secure", false, "connect to the source with TLS")
			}}, rest, stdout, stderr)
		if cfg == nil {
			return code
		}
		from.addr = pos[0]
		return copyFrom(ctx, cfg, from, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "surveysync: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

func isHelp(s string) bool { return s == "-h" || s == "--help" || s == "help" }

const feedUsage = `usage: surveysync feed run NAME [--dry-run] [--config FILE]
       surveysync feed uncertain NAME [--config FILE]
       surveysync feed resolve NAME --as pushed|retry KEY... [--config FILE]
`

func feedCLI(ctx context.Context, rest []string, stdout, stderr io.Writer) int {
	if len(rest) == 0 {
		fmt.Fprint(stderr, feedUsage)
		return exitUsage
	}
	if isHelp(rest[0]) {
		fmt.Fprint(stdout, feedUsage)
		return exitOK
	}
	switch rest[0] {
	case "run":
		var dry bool
		cfg, pos, code := load(command{name: "feed run", args: "NAME", positional: 1, configFlags: sinkFlags,
			about: "Run one feed once: push what its source holds now, then exit.",
			extra: func(fs *pflag.FlagSet) {
				fs.BoolVar(&dry, "dry-run", false, "print what would be pushed, call nothing")
			}}, rest[1:], stdout, stderr)
		if cfg == nil {
			return code
		}
		return feedRun(ctx, cfg, pos[0], dry, stdout, stderr)
	case "uncertain":
		cfg, pos, code := load(command{name: "feed uncertain", args: "NAME", positional: 1, configFlags: sinkFlags, noAPI: true,
			about: "List a feed's rows whose push outcome is unknown (the process stopped mid-call)."}, rest[1:], stdout, stderr)
		if cfg == nil {
			return code
		}
		return feedResolve(ctx, cfg, pos[0], "", nil, stdout, stderr)
	case "resolve":
		var as string
		cfg, pos, code := load(command{name: "feed resolve", args: "NAME --as pushed|retry KEY...", positional: 2, configFlags: sinkFlags, noAPI: true,
			about: "Settle uncertain rows of a feed (stop the daemon first).",
			extra: func(fs *pflag.FlagSet) {
				fs.StringVar(&as, "as", "", "pushed (the contact exists in the service) or retry (it does not: push it again)")
			}}, rest[1:], stdout, stderr)
		if cfg == nil {
			return code
		}
		if as == "" {
			fmt.Fprintln(stderr, "surveysync feed resolve: --as pushed|retry is required")
			return exitUsage
		}
		return feedResolve(ctx, cfg, pos[0], as, pos[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "surveysync feed: unknown subcommand %q\n%s", rest[0], feedUsage)
	return exitUsage
}

// load parses a command's flags and loads the configuration. It returns a
// nil configuration and the exit code when the command is not to run:
// --help (printed to stdout, exit 0), a flag or argument error (printed to
// stderr, exit 2), an invalid configuration (exit 3).
func load(c command, args []string, stdout, stderr io.Writer) (*config.Config, []string, int) {
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	path := fs.StringP("config", "c", "", "YAML configuration file (default: none; see examples/surveysync.yaml)")
	if c.configFlags == nil {
		config.RegisterFlags(fs)
	} else {
		config.RegisterSomeFlags(fs, c.configFlags...)
	}
	if c.extra != nil {
		c.extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printHelp(stdout, c, fs)
			return nil, nil, exitOK
		}
		fmt.Fprintf(stderr, "surveysync %s: %v%s\nRun 'surveysync %s --help' for its flags.\n", c.name, err, flagHint(err, fs), c.name)
		return nil, nil, exitUsage
	}
	pos := fs.Args()
	switch {
	case len(pos) < c.positional:
		fmt.Fprintf(stderr, "surveysync %s: missing argument: usage: surveysync %s %s\n", c.name, c.name, c.args)
		return nil, nil, exitUsage
	case c.positional == 0 && len(pos) > 0:
		fmt.Fprintf(stderr, "surveysync %s: unexpected argument %q\nRun 'surveysync %s --help' for its flags.\n", c.name, pos[0], c.name)
		return nil, nil, exitUsage
	case c.positional == 1 && len(pos) > 1:
		fmt.Fprintf(stderr, "surveysync %s: unexpected argument %q\nRun 'surveysync %s --help' for its flags.\n", c.name, pos[1], c.name)
		return nil, nil, exitUsage
	}
	var opts []config.LoadOption
	if c.noAPI {
		opts = append(opts, config.WithoutAPI())
	}
	cfg, warnings, err := config.LoadWarnings(*path, os.Environ(), fs, opts...)
	for _, w := range warnings {
		fmt.Fprintln(stderr, "surveysync: warning:", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "surveysync: configuration is not valid:\n%v\n", err)
		return nil, nil, exitConfig
	}
	if c.reload != nil {
		*c.reload = func() (*config.Config, error) {
			cfg, _, err := config.LoadWarnings(*path, os.Environ(), fs, opts...)
			return cfg, err
		}
	}
	return cfg, pos, exitOK
}

func printHelp(w io.Writer, c command, fs *pflag.FlagSet) {
	line := "surveysync " + c.name
	if c.args != "" {
		line += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nFlags:\n%s", line, c.about, fs.FlagUsages())
}

// flagHint suggests the flag meant by an unknown one ("--confg" → "--config").
func flagHint(err error, fs *pflag.FlagSet) string {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if best := config.Suggest(name, names); best != "" {
		return fmt.Sprintf(" (did you mean --%s?)", best)
	}
	return ""
}
