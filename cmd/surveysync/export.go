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
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/wide"
)

// exportFlags are surveysync export's flags.
type exportFlags struct {
	survey int64
	format string
	output string
	since  string
	bom    bool
	table  string // wide, responses or answers
}

// export writes a survey's wide view (or a long table) to CSV or Parquet,
// streaming (docs/schema.md, "Wide tables"), through the warehouse's
// Exporter.
func export(ctx context.Context, cfg *config.Config, f exportFlags, stdout, stderr io.Writer) int {
	if f.format != "csv" && f.format != "parquet" {
		fmt.Fprintf(stderr, "surveysync export: --format %s: want csv or parquet\n", f.format)
		return exitUsage
	}
	if f.table == "" {
		f.table = warehouse.ExportWide
	}
	if f.table != warehouse.ExportWide && f.table != warehouse.ExportResponses && f.table != warehouse.ExportAnswers {
		fmt.Fprintf(stderr, "surveysync export: --table %s: want wide, responses or answers\n", f.table)
		return exitUsage
	}
	if f.survey == 0 {
		fmt.Fprintln(stderr, "surveysync export: --survey ID is required")
		return exitUsage
	}
	var since time.Time
	if f.since != "" {
		t, err := time.Parse(time.RFC3339, f.since)
		if err != nil {
			if t, err = time.Parse(time.DateOnly, f.since); err != nil {
				fmt.Fprintf(stderr, "surveysync export: --since %q: want 2006-01-02 or 2006-01-02T15:04:05Z\n", f.since)
				return exitUsage
			}
		}
		since = t
	}
	// The warehouse's Exporter reads the rows: ClickHouse's views, or the
	// Parquet sink's files (same columns and formats).
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintf(stderr, "surveysync export: %v\nfix: %s\n", err, daemon.SinkFixFor(cfg, err))
		return exitFail
	}
	defer wh.Close()
	run := func(w io.Writer) (int, error) {
		return wh.Exporter().Export(ctx, f.table, f.survey, since, func(fields []wide.Field) (wide.Writer, error) {
			return openWriter(w, f, fields)
		})
	}
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
	n, err := run(bw)
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
	what := "responses"
	if f.table == warehouse.ExportAnswers {
		what = "answers rows"
	}
	fmt.Fprintf(stderr, "exported %d %s of survey %d (%s table, from %s) to %s in %s\n",
		n, what, f.survey, f.table, wh, name, daemon.RoundDuration(time.Since(start)))
	return exitOK
}

// openWriter is the writer of f's format.
func openWriter(w io.Writer, f exportFlags, fields []wide.Field) (wide.Writer, error) {
	if f.format == "parquet" {
		return wide.NewParquet(w, fields)
	}
	return wide.NewCSV(w, fields, f.bom)
}
