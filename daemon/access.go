package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// A token the service rejects: 401 on every call (the client's own stop:
// calls fail fast, one probe a minute), or a token it accepts that may read
// none of the polled surveys (403 on each). Either way nothing can be
// synced, and waiting does not help until someone fixes the token or its
// rights: in daemon mode it is an error state — /readyz, the gauge
// surveysync_api_token_rejected, the alert SurveysyncAPITokenRejected,
// surveysync status — retried slowly (the 401 probe once a minute, a
// forbidden survey's stream at its failed-cycle back-off, up to 30 min);
// --exit-when-synced ends with exit 1 (oneshot.go).

// accessWatch is the poller's lister that remembers, per survey, whether
// its last list call was forbidden (403).
type accessWatch struct {
	poll.Lister
	mu        sync.Mutex
	forbidden map[int64]bool
}

func newAccessWatch(l poll.Lister) *accessWatch {
	return &accessWatch{Lister: l, forbidden: map[int64]bool{}}
}

// ListResponses lists through the client and records whether the survey
// was forbidden.
func (a *accessWatch) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	r, err := a.Lister.ListResponses(ctx, surveyID, q)
	switch {
	case err == nil:
		a.set(surveyID, false)
	case errors.Is(err, surveyapi.ErrForbidden):
		a.set(surveyID, true)
	}
	return r, err
}

func (a *accessWatch) set(id int64, forbidden bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forbidden[id] = forbidden
}

// allForbidden reports whether every survey listed so far answered 403 at
// its last list call (and there was one).
func (a *accessWatch) allForbidden() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.forbidden) == 0 {
		return false
	}
	for _, f := range a.forbidden {
		if !f {
			return false
		}
	}
	return true
}

// tokenState is the error state of the token: nil while it works.
func tokenState(c *surveyapi.Client, a *accessWatch) error {
	if c != nil && !c.Healthy() {
		return fmt.Errorf("api: token rejected: %w", c.LastAuthError())
	}
	if a != nil && a.allForbidden() {
		return errors.New("api: the token may read none of the surveys (HTTP 403 on each): fix: check that api.token is the account's that owns the surveys, and its rights to them (surveysync doctor checks each)")
	}
	return nil
}

// registerTokenGauge registers surveysync_api_token_rejected.
func registerTokenGauge(reg prometheus.Registerer, c *surveyapi.Client, a *accessWatch) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surveysync_api_token_rejected",
		Help: "1 while the survey service rejects the API token: 401 on every call, or 403 on every polled survey; nothing is synced until api.token (or its account's rights) is fixed.",
	}, func() float64 {
		if tokenState(c, a) != nil {
			return 1
		}
		return 0
	}))
}
