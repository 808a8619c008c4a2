package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

type runFlags struct {
	exitWhenSynced bool
	force          bool                           // start despite another daemon's live lease
	reload         func() (*config.Config, error) // SIGHUP: the configuration again
	privacyApply   string                         // the privacy apply command with run's configuration flags
}

// runDaemon is surveysync run: the daemon (package daemon) until SIGTERM,
// or with --exit-when-synced until every survey is caught up, then where
// to look at the data.
func runDaemon(ctx context.Context, cfg *config.Config, fl runFlags, stdout, stderr io.Writer) int {
	log := daemon.NewLogger(cfg, stderr)
	err := daemon.Run(ctx, cfg, log, daemon.Options{
		Version:             readBuildInfo().Version,
		ExitWhenSynced:      fl.exitWhenSynced,
		Force:               fl.force,
		Reload:              fl.reload,
		PrivacyApplyCommand: fl.privacyApply,
		OnSynced: func(n int64, where string) {
			fmt.Fprintf(stdout, "surveysync: every survey is caught up (%d responses synced in all); the data is in %s\n", n, where)
			printWhereToLook(stdout, cfg)
		},
	})
	if err != nil {
		log.Error("surveysync stopped with an error", "err", err)
		fmt.Fprintln(stderr, "surveysync run:", err)
		return exitFail
	}
	return exitOK
}

func printWhereToLook(w io.Writer, cfg *config.Config) {
	if len(cfg.ClickHouse.Addr) > 0 {
		fmt.Fprintf(w, "  clickhouse-client --query 'SELECT response_status, count() FROM %s.responses_current GROUP BY response_status'\n", cfg.ClickHouse.Database)
		return
	}
	dir := cfg.Parquet.Dir
	fmt.Fprintf(w, "  responses: %s\n  answers:   %s\n", filepath.Join(dir, flatten.TableResponses), filepath.Join(dir, flatten.TableAnswers))
	if cfg.Files.Enabled {
		fmt.Fprintf(w, "  uploaded files: %s (index: %s)\n", cfg.Files.URL, filepath.Join(dir, "uploaded_files.db"))
	}
	fmt.Fprintf(w, "  look at it: surveysync query --parquet-dir %s\n", dir)
	fmt.Fprintf(w, "  or DuckDB (current rows: latest version per response, deleted excluded; docs/parquet.md):\n")
	fmt.Fprintf(w, "    duckdb -c \"SELECT response_status, count(*) FROM (SELECT * FROM read_parquet('%s/responses/**/*.parquet', hive_partitioning = false) QUALIFY row_number() OVER (PARTITION BY response_id ORDER BY _version DESC) = 1) WHERE is_deleted = 0 GROUP BY 1\"\n", dir)
}
