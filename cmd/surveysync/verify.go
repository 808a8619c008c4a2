package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/verify"
)

type verifyFlags struct {
	surveys []int64
	deep    bool
	repair  bool
	json    bool
}

// verifyRow is one line of --json: exactly these keys.
type verifyRow struct {
	SurveyID        int64  `json:"survey_id"`
	Stream          string `json:"stream"`
	Service         int64  `json:"service"`
	Warehouse       int64  `json:"warehouse"`
	Missing         int    `json:"missing"`
	Extra           int    `json:"extra"`
	ContentMismatch int    `json:"content_mismatch"`
}

// maxListedIDs is how many differing ids the table lists per stream and
// kind.
const maxListedIDs = 10

// verifyCmd is surveysync verify: exit 0 when nothing differs, 1 when
// something does, 2 when a survey could not be verified (as diff(1)).
func verifyCmd(ctx context.Context, cfg *config.Config, f verifyFlags, stdout, stderr io.Writer) int {
	if cfg.Demo.Emulator.Enabled {
		fmt.Fprintln(stderr, "surveysync verify: the demo's emulator lives inside the running daemon, which this command cannot reach: give a configuration with api.base_url and api.token (and the daemon's clickhouse or parquet.dir)")
		return exitUsage
	}
	log := daemon.NewLogger(cfg, stderr)
	o := daemon.VerifyOptions{Surveys: f.surveys, Deep: f.deep}
	results, code := verifyPass(ctx, cfg, o, f, stdout, stderr)
	if !f.repair || code != exitFail {
		return code
	}
	where, err := daemon.Repair(ctx, cfg, log, results)
	if err != nil {
		fmt.Fprintln(stderr, "surveysync verify: repair:", err)
		return exitUsage
	}
	n := 0
	for _, r := range results {
		n += len(r.Rereads())
	}
	fmt.Fprintf(stderr, "surveysync verify: %d responses read again (%s); verifying again\n", n, where)
	_, code = verifyPass(ctx, cfg, o, f, stdout, stderr)
	return code
}

// verifyPass verifies every survey once and prints the results.
func verifyPass(ctx context.Context, cfg *config.Config, o daemon.VerifyOptions, f verifyFlags, stdout, stderr io.Writer) ([]*verify.Result, int) {
	var results []*verify.Result
	failed, differs := false, false
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	enc := json.NewEncoder(stdout)
	head := "SURVEY\tSTREAM\tSERVICE\tWAREHOUSE\tMISSING\tEXTRA\t"
	if f.deep {
		head += "CONTENT\t"
	}
	var notes []string
	err := daemon.Verify(ctx, cfg, daemon.NewLogger(cfg, stderr), o, func(r *verify.Result, err error) {
		if err != nil {
			failed = true
			fmt.Fprintf(stderr, "surveysync verify: survey %d could not be verified: %v\n", r.SurveyID, err)
			return
		}
		if len(results) == 0 && !f.json {
			fmt.Fprintln(tw, head)
		}
		results = append(results, r)
		differs = differs || !r.Clean()
		for _, s := range r.Streams {
			if f.json {
				_ = enc.Encode(verifyRow{SurveyID: r.SurveyID, Stream: s.Stream, Service: s.Service, Warehouse: s.Warehouse,
					Missing: len(s.Missing), Extra: len(s.Extra), ContentMismatch: len(s.Content)})
				continue
			}
			line := fmt.Sprintf("%d\t%s\t%d\t%d\t%d\t%d\t", r.SurveyID, s.Stream, s.Service, s.Warehouse, len(s.Missing), len(s.Extra))
			if f.deep {
				line += fmt.Sprintf("%d\t", len(s.Content))
			}
			fmt.Fprintln(tw, line)
			notes = append(notes, idNotes(r.SurveyID, s)...)
		}
		notes = append(notes, fmt.Sprintf("survey %d: verified up to %s in %s: %d list calls, %d detail calls",
			r.SurveyID, survey.FormatTime(r.Until), r.Duration.Round(time.Millisecond), r.ListCalls, r.DetailCalls))
	})
	if !f.json {
		_ = tw.Flush()
	}
	out := stdout
	if f.json {
		out = stderr
	}
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
	if err != nil {
		fmt.Fprintln(stderr, "surveysync verify:", err)
		return results, exitUsage
	}
	switch {
	case failed:
		return results, exitUsage
	case differs:
		return results, exitFail
	}
	return results, exitOK
}

// idNotes names the differing ids of a stream (the first maxListedIDs of
// each kind).
func idNotes(surveyID int64, s verify.Stream) []string {
	var out []string
	for _, k := range []struct {
		what string
		ids  []survey.GUID
	}{{"missing", s.Missing}, {"extra", s.Extra}, {"content differs", s.Content}, {"rejected (not missing)", s.Rejected}} {
		if len(k.ids) == 0 {
			continue
		}
		ids := make([]string, 0, maxListedIDs)
		for _, id := range k.ids[:min(len(k.ids), maxListedIDs)] {
			ids = append(ids, string(id))
		}
		more := ""
		if len(k.ids) > maxListedIDs {
			more = fmt.Sprintf(" and %d more", len(k.ids)-maxListedIDs)
		}
		out = append(out, fmt.Sprintf("survey %d %s, %s: %s%s", surveyID, s.Stream, k.what, strings.Join(ids, " "), more))
	}
	return out
}
