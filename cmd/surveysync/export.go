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
	"github.com/surveysync/surveysync/sink/parquet"
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

// export writes a survey's wide view to CSV or Parquet, streaming
// (docs/schema.md, "Wide tables"), from ClickHouse or the Parquet sink.
func export(ctx context.Context, cfg *config.Config, f exportFlags, stdout, stderr io.Writer) int {
	if f.format != "csv" && f.format != "parquet" {
		fmt.Fprintf(stderr, "surveysync export: --format %s: want csv or parquet\n", f.format)
		return exitUsage
	}
	if f.table == "" {
		f.table = "wide"
	}
	if f.table != "wide" && f.table != "responses" && f.table != "answers" {
		fmt.Fprintf(stderr, "surveysync export: --table %s: want wide, responses or answers\n", f.table)
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
	// From ClickHouse's view when ClickHouse is configured, else from the
	// Parquet sink's files (package parquet; same columns and formats).
	var run func(w io.Writer) (int, error)
	source := ""
	if cfg.ClickHouse.Enabled() {
		log := daemon.NewLogger(cfg, stderr)
		s, err := clickhouse.Open(ctx, daemon.ClickHouseOptions(cfg, log, prometheus.NewRegistry()))
		if err != nil {
			fmt.Fprintf(stderr, "surveysync export: %v\nfix: %s\n", err, daemon.SinkFix(cfg))
			return exitFail
		}
		defer s.Close()
		source = s.Database() + "." + clickhouse.WideViewName(f.survey)
		run = func(w io.Writer) (int, error) {
			if f.table != "wide" {
				return s.ExportTable(ctx, f.table, f.survey, o, func(fields []wide.Field) (wide.Writer, error) {
					return openWriter(w, f, fields)
				})
			}
			if f.format == "parquet" {
				return s.ExportWideParquet(ctx, w, f.survey, o)
			}
			return s.ExportWideCSV(ctx, w, f.survey, o)
		}
		if f.table != "wide" {
			source = s.Database() + "." + f.table + "_current"
		}
	} else {
		dir, err := filepath.Abs(cfg.Parquet.Dir)
		if err != nil {
			fmt.Fprintln(stderr, "surveysync export:", err)
			return exitFail
		}
		if _, err := os.Stat(filepath.Join(dir, "responses", fmt.Sprintf("survey_id=%d", f.survey))); err != nil {
			fmt.Fprintf(stderr, "surveysync export: no responses of survey %d under %s (clickhouse.addr is empty: export reads the Parquet sink's files; run `surveysync run` first, or set --parquet-dir)\n", f.survey, dir)
			return exitFail
		}
		source = "Parquet files under " + dir
		po := parquet.WideOptions{Since: o.Since, ChoiceIDs: cfg.Wide.ChoiceIDs}
		run = func(w io.Writer) (int, error) {
			open := func(fields []wide.Field) (wide.Writer, error) { return openWriter(w, f, fields) }
			if f.table != "wide" {
				return parquet.ExportTable(ctx, dir, f.table, f.survey, po, open)
			}
			return parquet.ExportWide(ctx, dir, f.survey, po, open)
		}
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
	if f.table == "answers" {
		what = "answers rows"
	}
	fmt.Fprintf(stderr, "exported %d %s of survey %d (%s) to %s in %s\n",
		n, what, f.survey, source, name, daemon.RoundDuration(time.Since(start)))
	return exitOK
}

// openWriter is the writer of f's format.
func openWriter(w io.Writer, f exportFlags, fields []wide.Field) (wide.Writer, error) {
	if f.format == "parquet" {
		return wide.NewParquet(w, fields)
	}
	return wide.NewCSV(w, fields, f.bom)
}
