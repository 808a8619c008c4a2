package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/sink/clickhouse"
)

// exportFlags are surveysync export's flags.
type exportFlags struct {
	survey int64
	format string
	output string
	since  string
	bom    bool
}

// export writes a survey's wide view to CSV or Parquet, streaming
// (docs/schema.md, "Wide tables"), from ClickHouse.
func export(ctx context.Context, cfg *config.Config, f exportFlags, stdout, stderr io.Writer) int {
	if f.format != "csv" && f.format != "parquet" {
		fmt.Fprintf(stderr, "surveysync export: --format %s: want csv or parquet\n", f.format)
		return exitUsage
	}
	if f.survey == 0 {
		fmt.Fprintln(stderr, "surveysync export: --survey ID is required")
		return exitUsage
	}
	var o clickhouse.ExportOptions
	o.BOM = f.bom
	if f.since != "" {
		t, err := time.Parse(time.RFC3339, f.since)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, f.since); err != nil {
				fmt.Fprintf(stderr, "surveysync export: --since %q: want 2006-01-02 or 2006-01-02T15:04:05Z\n", f.since)
				return exitUsage
			}
		}
		o.Since = t
	}
	if !cfg.ClickHouse.Enabled() {
		fmt.Fprintln(stderr, "surveysync export: clickhouse.addr is empty: export reads the wide views in ClickHouse (the Parquet sink's files: docs/parquet.md)")
		return exitConfig
	}
	log := daemon.NewLogger(cfg, stderr)
	s, err := clickhouse.Open(ctx, daemon.ClickHouseOptions(cfg, log, prometheus.NewRegistry()))
	if err != nil {
		fmt.Fprintf(stderr, "surveysync export: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
		return exitFail
	}
	defer s.Close()
	out, name := stdout, "standard output"
	var file *os.File
	if f.output != "" && f.output != "-" {
		// Written beside, renamed when complete: a failed export leaves no
		// half file under the name.
		tmp, err := os.CreateTemp(filepath.Dir(f.output), ".surveysync-export-*")
		if err != nil {
			fmt.Fprintln(stderr, "surveysync export:", err)
			return exitFail
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		file, out, name = tmp, tmp, f.output
	}
	start := time.Now()
	// Buffered, and not an io.Closer: the Parquet writer must not close
	// the file before it is renamed.
	bw := bufio.NewWriterSize(out, 256<<10)
	var n int
	if f.format == "parquet" {
		n, err = s.ExportWideParquet(ctx, bw, f.survey, o)
	} else {
		n, err = s.ExportWideCSV(ctx, bw, f.survey, o)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && file != nil {
		if err = file.Close(); err == nil {
			err = os.Rename(file.Name(), f.output)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "surveysync export:", err)
		return exitFail
	}
	fmt.Fprintf(stderr, "exported %d responses of survey %d (%s) to %s in %s\n",
		n, f.survey, s.Database()+"."+clickhouse.WideViewName(f.survey), name, daemon.RoundDuration(time.Since(start)))
	return exitOK
}
