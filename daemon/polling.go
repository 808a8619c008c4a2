package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// Which surveys are polled: the configured ones, those the surveys table
// knows and has not seen end, and what makes a survey unreadable.

// pollingSet is the configured surveys plus those learned earlier (from
// webhooks or synced responses) that have not ended, less surveys_exclude.
func pollingSet(cfg *config.Config, book *surveyBook) []int64 {
	seen := map[int64]bool{}
	for _, id := range cfg.SurveysExclude {
		seen[id] = true
	}
	var out []int64
	for _, id := range append(append([]int64(nil), cfg.Surveys...), book.active()...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// surveyUnreadable reports whether a list error means the survey cannot be
// read with this token at all: not found (404) or forbidden (403).
func surveyUnreadable(err error) bool {
	return errors.Is(err, survey.ErrNotFound) || errors.Is(err, surveyapi.ErrForbidden)
}

// describeUnreadable is the short reason a survey cannot be read:
// "not found (HTTP 404)".
func describeUnreadable(err error) string {
	var ae *surveyapi.APIError
	status := 0
	if errors.As(err, &ae) {
		status = ae.Status
	}
	what := "cannot be read"
	switch {
	case errors.Is(err, survey.ErrNotFound):
		what = "not found"
	case errors.Is(err, surveyapi.ErrForbidden):
		what = "forbidden (the token's account may not read it)"
	}
	if status != 0 {
		return fmt.Sprintf("%s (HTTP %d)", what, status)
	}
	return what
}

// errUnreadableSurveys is the error of --exit-when-synced when configured
// surveys cannot be read: one line per survey.
func errUnreadableSurveys(failed map[int64]error) error {
	ids := make([]int64, 0, len(failed))
	for id := range failed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "survey %d: %s", id, describeUnreadable(failed[id]))
	}
	b.WriteString(": check the ids in surveys and the token's account")
	return errors.New(b.String())
}
