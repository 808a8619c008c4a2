package surveyapi

import "time"

// Healthy reports whether the service accepts the token: false from a 401
// until a probe call succeeds again. It costs no call; use it for /readyz.
func (c *Client) Healthy() bool {
	return c.gate.state().mode != modeUnauthorized
}

// LastAuthError returns the 401 (*APIError, with the service's request id
// and message) that stopped the client, or nil while the token is accepted.
// Stats().AuthFailedSince tells since when.
func (c *Client) LastAuthError() error {
	st := c.gate.state()
	if st.mode != modeUnauthorized {
		return nil
	}
	return st.authErr
}

// Count returns how many requests of op ended with outcome (the Op* and
// Outcome* constants), since the client was made. Unknown names count 0.
func (c *Client) Count(op, outcome string) int64 {
	for i, o := range operations {
		if o != op {
			continue
		}
		for j, oc := range outcomes {
			if oc == outcome {
				return c.m.counts[i][j].Load()
			}
		}
	}
	return 0
}

// Stats is a snapshot of the client's counters and state, for `status`,
// tests and logs.
type Stats struct {
	Requests         map[string]map[string]int64 // operation → outcome → requests sent (non-zero only)
	Total            int64                       // requests sent, all operations
	Retries          int64                       // retries, all operations
	CallsThisMonth   int64                       // requests sent since the start of the UTC month (this process)
	ConcurrencyLimit int                         // current adaptive limit
	InFlight         int
	Paused           bool      // a 402 pause or a 401 stop is on
	PausedUntil      time.Time // end of the 402 pause, or the next 401 probe
	Healthy          bool      // the token is accepted
	AuthFailedSince  time.Time // first 401 of the current stop; zero while healthy
	HoldUntil        time.Time // the shared 429 gate: nobody sends before this
}

// Stats returns a snapshot. Cheap: no Prometheus gathering.
func (c *Client) Stats() Stats {
	s := Stats{Requests: map[string]map[string]int64{}}
	for i, op := range operations {
		for j, oc := range outcomes {
			if n := c.m.counts[i][j].Load(); n > 0 {
				if s.Requests[op] == nil {
					s.Requests[op] = map[string]int64{}
				}
				s.Requests[op][oc] = n
				s.Total += n
			}
		}
	}
	s.Retries = c.m.retriesCount.Load()
	s.CallsThisMonth = c.m.callsThisMonth(time.Now())
	s.ConcurrencyLimit, s.InFlight = c.conc.snapshot()
	st := c.gate.state()
	s.Paused = st.mode != modeOpen
	if s.Paused {
		s.PausedUntil = st.until
	}
	s.Healthy = st.mode != modeUnauthorized
	if !s.Healthy {
		s.AuthFailedSince = st.authSince
	}
	if st.notBefore.After(time.Now()) {
		s.HoldUntil = st.notBefore
	}
	return s
}
