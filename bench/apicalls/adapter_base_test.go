//go:build apicalls_base

package apicalls

import (
	"time"

	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/survey"
)

// pollOptions for the poller before issue 12: it sleeps PollInterval on the
// real clock (and reads nothing else of it), so the 30 s default is given
// divided by the scale.
func pollOptions(o poll.Options, ck *clock, _ bool, _ int64, _ func() int64) poll.Options {
	o.PollInterval = ck.real(30 * time.Second)
	return o
}

func observe(*poll.Poller, int64, survey.GUID, string) {}

func projection(*poll.Poller) (float64, float64) { return -1, 1 }
