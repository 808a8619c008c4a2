// Command surveysync keeps a ClickHouse warehouse (or Parquet files) in sync
// with the survey service, copies uploaded files to object storage, and pushes
// contacts from feeds into distribution channels.
//
//	surveysync run [--config FILE] [--set key=value]... [--exit-when-synced]
//	surveysync doctor [--config FILE]
//	surveysync status [--config FILE]
//	surveysync config print [--config FILE]
//	surveysync feed run NAME [--dry-run] [--config FILE]
//	surveysync feed uncertain NAME | feed resolve NAME --as pushed|retry KEY...
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
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/config"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runCLI(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `surveysync keeps ClickHouse in sync with the survey service.

Usage:
  surveysync run [--config FILE] [--set key=value]... [--exit-when-synced]
  surveysync doctor [--config FILE]          check token, ClickHouse, object store, ports
  surveysync status [--config FILE]          watermark, lag and errors per survey and stream
  surveysync config print [--config FILE]    the effective configuration, secrets masked
  surveysync feed run NAME [--dry-run]       run a feed once (--dry-run: what it would push, calling nothing)
  surveysync feed uncertain NAME             rows whose push outcome is unknown after a crash
  surveysync feed resolve NAME --as pushed|retry KEY...   settle them (daemon stopped)
  surveysync version

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
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "config":
		if len(rest) == 0 || rest[0] != "print" {
			fmt.Fprintln(stderr, "usage: surveysync config print [--config FILE]")
			return exitUsage
		}
		cfg, code := load("config print", rest[1:], stderr, nil)
		if cfg == nil {
			return code
		}
		if err := cfg.Print(stdout); err != nil {
			fmt.Fprintln(stderr, "surveysync:", err)
			return exitFail
		}
		return exitOK
	case "run":
		var exitWhenSynced bool
		cfg, code := load("run", rest, stderr, func(fs *pflag.FlagSet) {
			fs.BoolVar(&exitWhenSynced, "exit-when-synced", false, "stop once every survey is caught up (demo, one-shot backfill)")
		})
		if cfg == nil {
			return code
		}
		return runDaemon(ctx, cfg, runFlags{exitWhenSynced: exitWhenSynced}, stdout, stderr)
	case "doctor":
		cfg, code := load("doctor", rest, stderr, nil)
		if cfg == nil {
			return code
		}
		return doctor(ctx, cfg, stdout)
	case "status":
		cfg, code := load("status", rest, stderr, nil)
		if cfg == nil {
			return code
		}
		return status(ctx, cfg, stdout, stderr)
	case "feed":
		if len(rest) >= 2 && rest[0] == "uncertain" {
			cfg, code := load("feed uncertain", rest[2:], stderr, nil)
			if cfg == nil {
				return code
			}
			return feedResolve(ctx, cfg, rest[1], "", nil, stdout, stderr)
		}
		if len(rest) >= 2 && rest[0] == "resolve" {
			var as string
			var keys []string
			cfg, code := loadArgs("feed resolve", rest[2:], stderr, func(fs *pflag.FlagSet) {
				fs.StringVar(&as, "as", "", "pushed (the contact exists in the service) or retry (it does not: push it again)")
			}, &keys)
			if cfg == nil {
				return code
			}
			if as == "" || len(keys) == 0 {
				fmt.Fprintln(stderr, "usage: surveysync feed resolve NAME --as pushed|retry KEY... [--config FILE]")
				return exitUsage
			}
			return feedResolve(ctx, cfg, rest[1], as, keys, stdout, stderr)
		}
		if len(rest) < 2 || rest[0] != "run" {
			fmt.Fprintln(stderr, "usage: surveysync feed run NAME [--dry-run] [--config FILE]\n       surveysync feed uncertain NAME\n       surveysync feed resolve NAME --as pushed|retry KEY...")
			return exitUsage
		}
		name := rest[1]
		var dry bool
		cfg, code := load("feed run", rest[2:], stderr, func(fs *pflag.FlagSet) {
			fs.BoolVar(&dry, "dry-run", false, "print what would be pushed, call nothing")
		})
		if cfg == nil {
			return code
		}
		return feedRun(ctx, cfg, name, dry, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "surveysync: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// load parses the common flags (plus extra ones) and loads the configuration.
func load(name string, args []string, stderr io.Writer, extra func(*pflag.FlagSet)) (*config.Config, int) {
	return loadArgs(name, args, stderr, extra, nil)
}

// loadArgs is load for commands that take positional arguments (into
// positional); without it, a positional argument is a usage error.
func loadArgs(name string, args []string, stderr io.Writer, extra func(*pflag.FlagSet), positional *[]string) (*config.Config, int) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.StringP("config", "c", "", "YAML configuration file")
	config.RegisterFlags(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, exitOK
		}
		return nil, exitUsage
	}
	if positional != nil {
		*positional = fs.Args()
	} else if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "surveysync %s: unexpected argument %q\n", name, fs.Arg(0))
		return nil, exitUsage
	}
	cfg, err := config.Load(*path, os.Environ(), fs)
	if err != nil {
		fmt.Fprintf(stderr, "surveysync: configuration is not valid:\n%v\n", err)
		return nil, exitConfig
	}
	return cfg, exitOK
}

func versionString() string {
	v := version
	goVersion := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("surveysync %s (%s)", v, goVersion)
}
