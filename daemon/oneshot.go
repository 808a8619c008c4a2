package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/source/surveyapi"
)

// tokenFix is doctor's fix line for a rejected token.
const tokenFix = "check api.token (SURVEYSYNC_API__TOKEN) and api.base_url; the account needs API access (surveysync doctor checks it)"

// errTokenRejected is the error of a one-shot run whose token the service
// rejects (401): nothing can be read, so waiting cannot end it.
func errTokenRejected(c *surveyapi.Client) error {
	return fmt.Errorf("the service rejects the API token: %w: nothing can be synced; fix: %s", c.LastAuthError(), tokenFix)
}

// watchToken ends a one-shot run (--exit-when-synced) once the service has
// rejected the token: the daemon would wait for a fixed token (and probe
// once a minute) for ever, a one-shot run must fail fast instead. It
// returns nil when ctx ends first.
func watchToken(ctx context.Context, c *surveyapi.Client) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if !c.Healthy() {
				return errTokenRejected(c)
			}
		}
	}
}
