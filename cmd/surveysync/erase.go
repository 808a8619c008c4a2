package main

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/erase"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// eraseFlags are surveysync erase's flags.
type eraseFlags struct {
	survey   int64
	response []string
	contact  int64
}

// eraseCLI is surveysync erase (docs/privacy.md, "Erasure"): it erases
// responses on request, with the daemon running or stopped, and finishes
// any erasure a killed run left started.
func eraseCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f eraseFlags
	cfg, _, code := load(command{name: "erase", args: "--survey S --response ID... | --contact ID", noAPI: true,
		configFlags: sinkFlags,
		about:       "Erase responses physically: their rows in every table, their uploaded files, webhook events and rejects; an audit row in erasures records it and a tombstone keeps them out of later syncs. Idempotent; also finishes erasures a killed run left started. Works with the daemon running or stopped.",
		extra: func(fs *pflag.FlagSet) {
			fs.Int64Var(&f.survey, "survey", 0, "the survey of --response")
			fs.StringSliceVar(&f.response, "response", nil, "a response id to erase (repeatable)")
			fs.Int64Var(&f.contact, "contact", 0, "erase every response of this contact id (hashed as privacy.fields.contact_id says) and its feed ledger rows")
		}}, args, stdout, stderr)
	if cfg == nil {
		return code
	}
	if (f.contact != 0) == (len(f.response) > 0) || (len(f.response) > 0 && f.survey == 0) {
		fmt.Fprintln(stderr, "surveysync erase: give --survey S --response ID, or --contact ID")
		return exitUsage
	}
	log := daemon.NewLogger(cfg, stderr)
	wh, err := daemon.OpenWarehouse(ctx, cfg, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(stderr, "surveysync erase:", err)
		return exitFail
	}
	defer wh.Close()
	s, closeStore, err := daemon.NewEraser(ctx, cfg, wh, log)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync erase:", err)
		return exitFail
	}
	defer func() { _ = closeStore() }()
	if s == nil {
		fmt.Fprintf(stderr, "surveysync erase: %s cannot erase responses\n", wh.String())
		return exitConfig
	}
	if rep, err := s.Resume(ctx, false); err != nil {
		fmt.Fprintln(stderr, "surveysync erase: finish erasures a previous run left started:", err)
		return exitFail
	} else if rep.Responses > 0 {
		fmt.Fprintf(stdout, "finished %d erasures a previous run left started: %s\n", rep.Responses, rep)
	}
	var rep erase.Report
	if f.contact != 0 {
		rep, err = s.EraseContact(ctx, f.contact)
	} else {
		keys := make([]warehouse.ResponseKey, 0, len(f.response))
		for _, id := range f.response {
			g, perr := survey.ParseGUID(id)
			if perr != nil {
				fmt.Fprintf(stderr, "surveysync erase: --response: not a response id (%d characters)\n", len(id))
				return exitUsage
			}
			keys = append(keys, warehouse.ResponseKey{SurveyID: f.survey, ResponseID: g})
		}
		rep, err = s.Erase(ctx, keys, warehouse.ReasonRequest)
	}
	if err != nil {
		fmt.Fprintln(stderr, "surveysync erase:", err)
		fmt.Fprintln(stderr, "surveysync erase: the tombstones are written: run the same command again to finish (a running daemon also finishes it within a minute)")
		return exitFail
	}
	fmt.Fprintf(stdout, "erased %s", rep)
	if f.contact != 0 {
		fmt.Fprintf(stdout, "; pushed_contacts=%d", rep.Contacts)
	}
	fmt.Fprintln(stdout)
	return exitOK
}
