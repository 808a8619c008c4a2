//go:build !apicalls_base

package apicalls

import (
	"time"

	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/survey"
)

// pollOptions completes the options as the daemon does after issue 12: the
// scheduler sleeps on the compressed clock, and knows about webhooks and
// the budget.
func pollOptions(o poll.Options, ck *clock, webhooks bool, budget int64, count func() int64) poll.Options {
	o.PollInterval = 30 * time.Second
	o.SettleLag = 5 * time.Second // the daemon's default (sync.settle_lag)
	o.After = ck.after
	o.Webhooks = webhooks
	o.MonthlyBudget = budget
	o.CallCount = count
	return o
}

func observe(p *poll.Poller, surveyID int64, id survey.GUID, status string) {
	p.Observe(surveyID, id, status)
}

func projection(p *poll.Poller) (float64, float64) { return p.Projection() }
