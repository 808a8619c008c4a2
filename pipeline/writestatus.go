package pipeline

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

// WriteError is a failed sink write, described: the table the write
// targeted and the server's answer. Sinks return it (wrapped or not; it
// wraps the original error, so permanent.Is still sees a permanent one).
// The pipeline's log lines, the surveysync_sink_write_failing gauge and
// WriteStatus (surveysync status) are made of it.
type WriteError struct {
	Table   string // the table the write targeted, e.g. "answers"; "" when unknown
	Code    int    // the server's error code (a ClickHouse exception code); 0 when there is none (network, timeout)
	Message string // the server's message: one line, bounded, with no secret in it
	// Refused reports that the server refuses the write and will go on
	// refusing it until an operator acts: an unknown table or column, a
	// type error, missing grants, a read-only user. Otherwise the failure
	// is transient (network, timeout, an overloaded server) and heals by
	// itself. Both are retried; a refusal more slowly (RefusedRetryMax).
	Refused bool
	Err     error
}

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Classes of a failing sink write (WriteStatus.Class, the class label of
// surveysync_sink_write_failing).
const (
	WriteRefused   = "refused"   // the warehouse refuses the rows until an operator acts
	WriteTransient = "transient" // an outage: it heals by itself
)

// MaxWriteMessageBytes bounds WriteStatus.Message.
const MaxWriteMessageBytes = 512

// WriteStatus is the state of the pipeline's writes to the sink, for
// surveysync status (the daemon serves it on its metrics listener) and
// tests. While Failing, the batch that failed is held and written again
// after NextRetry: nothing acknowledged is lost, and the sources wait.
type WriteStatus struct {
	Failing   bool      `json:"failing"`
	Class     string    `json:"class,omitempty"`   // WriteRefused or WriteTransient
	Table     string    `json:"table,omitempty"`   // the table the failing write targeted; "" when the sink did not say
	Code      int       `json:"code,omitempty"`    // the server's error code; 0 when none
	Message   string    `json:"message,omitempty"` // the server's message (one line, at most MaxWriteMessageBytes)
	Since     time.Time `json:"since"`             // first failure of this episode (zero when not failing)
	Attempts  int       `json:"attempts"`          // failed attempts in this episode
	NextRetry time.Time `json:"next_retry"`        // when the batch is written again
	Responses int64     `json:"responses"`         // responses in the batch (or part of it) being written
	LastWrite time.Time `json:"last_write"`        // last successful write (zero: none yet in this process)
}

// WriteStatus reports the state of the writes to the sink. Safe for
// concurrent use.
func (p *Pipeline) WriteStatus() WriteStatus {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.ws
}

// describeWrite is what a failed write says about itself.
func describeWrite(err error) (table string, code int, msg string, refused bool) {
	var we *WriteError
	if errors.As(err, &we) {
		table, code, msg, refused = we.Table, we.Code, we.Message, we.Refused
	}
	if msg == "" {
		msg = err.Error()
	}
	msg = strings.Join(strings.Fields(msg), " ")
	return table, code, truncateUTF8(msg, MaxWriteMessageBytes), refused
}

// tableLabel is the table label of a failing write.
func tableLabel(t string) string {
	switch t {
	case flatten.TableResponses, flatten.TableAnswers:
		return t
	}
	return "other"
}

// failing records a failed write of a batch of n responses that is about
// to be tried again, logs one line for this back-off step (never one per
// response) and returns how long to wait. class overrides the error's own
// (a batch every response of which the sink refuses one by one is
// WriteRefused). This is the write path's one back-off: it doubles from
// RetryInitial per failed attempt of the episode, up to RetryMax for a
// transient failure and RefusedRetryMax for a refusal (internal/backoff,
// equal jitter).
func (p *Pipeline) failing(err error, class string, n int64) time.Duration {
	table, code, msg, refused := describeWrite(err)
	if class == "" {
		class = WriteTransient
		if refused {
			class = WriteRefused
		}
	}
	now := p.o.Now()
	p.wmu.Lock()
	if !p.ws.Failing {
		p.ws = WriteStatus{Failing: true, Since: now, LastWrite: p.ws.LastWrite}
	}
	p.ws.Attempts++
	p.ws.Class, p.ws.Table, p.ws.Code, p.ws.Message, p.ws.Responses = class, table, code, msg, n
	limit := p.o.RetryMax
	if class == WriteRefused {
		limit = p.o.RefusedRetryMax
	}
	d := backoff.Policy{Initial: p.o.RetryInitial, Max: limit}.Delay(p.ws.Attempts)
	p.ws.NextRetry = now.Add(d)
	ws := p.ws
	p.wmu.Unlock()

	p.m.setFailing(tableLabel(table), class)
	codeText := "none"
	if code != 0 {
		codeText = strconv.Itoa(code)
	}
	args := []any{"table", table, "code", codeText, "message", msg, "class", class,
		"attempt", ws.Attempts, "failing_for", now.Sub(ws.Since).Round(time.Second), "retry_in", d.Round(time.Millisecond), "responses", n}
	if class == WriteRefused {
		p.o.Logger.Error("the warehouse refuses the write: an operator must fix the table or the grants (surveysync doctor); the batch is held and retried, nothing acknowledged is lost", args...)
	} else {
		p.o.Logger.Warn("sink write failed; the batch is held and retried", args...)
	}
	return d
}

// writeSucceeded records a successful write and, after failures, logs the
// recovery once.
func (p *Pipeline) writeSucceeded() {
	now := p.o.Now()
	p.wmu.Lock()
	was := p.ws
	p.ws = WriteStatus{LastWrite: now}
	p.wmu.Unlock()
	if !was.Failing {
		return
	}
	p.m.setFailing("", "")
	p.o.Logger.Info("sink writes succeed again", "table", was.Table, "class", was.Class,
		"failed_attempts", was.Attempts, "failed_for", now.Sub(was.Since).Round(time.Second))
}

// refusing reports whether the writes are failing because the warehouse
// refuses them (a table problem, not one response's data).
func (p *Pipeline) refusing() bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.ws.Failing && p.ws.Class == WriteRefused
}
