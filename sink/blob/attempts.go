package blob

import (
	"context"
	"errors"
	"time"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// process runs t. A task put back for a retry (q.later) stays held; any
// other outcome releases it.
func (c *Copier) process(ctx context.Context, t task) {
	requeued := false
	defer func() {
		if !requeued {
			c.q.done(t)
		}
	}()
	switch {
	case t.del:
		requeued = c.processDelete(ctx, t)
	case c.wasDeleted(t.ref):
		// its response was deleted after the file was queued
	default:
		start := c.o.Now()
		st, err := c.Copy(ctx, t.ref)
		if err != nil {
			requeued = c.failed(ctx, t, st, err)
			return
		}
		c.stored(t, st, start)
	}
}

// processDelete marks a deleted response's files; on failure it puts t
// back for a retry after the back-off and reports true.
func (c *Copier) processDelete(ctx context.Context, t task) (requeued bool) {
	err := c.markDeleted(ctx, t.ref.SurveyID, t.ref.ResponseID)
	if err == nil || ctx.Err() != nil {
		return false
	}
	c.m.failures.WithLabelValues(ReasonDelete).Inc()
	t.attempts++
	c.o.Logger.Warn("deleted response's files not marked yet; will retry",
		"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "attempt", t.attempts, "err", err)
	t.due = c.o.Now().Add(c.retryWait(t.attempts))
	c.q.later(t)
	return true
}

// failed records a failed copy attempt in the index and either puts t back
// for a retry after the back-off (reporting true) or, when the failure is
// permanent or MaxAttempts is reached, leaves the file to the index
// reload. A failure caused by shutdown is recorded as pending instead.
func (c *Copier) failed(ctx context.Context, t task, st Stored, err error) (requeued bool) {
	if ctx.Err() != nil {
		// Shutting down: Run records the file as pending.
		c.record(files.Record{FileRef: t.ref, StoredAt: c.o.Now(), Error: "pending: copy interrupted by shutdown", Attempts: t.attempts})
		return false
	}
	t.attempts++
	reason := ReasonDownload
	var ce *CopyError
	if errors.As(err, &ce) {
		reason = ce.Reason
	}
	c.m.failures.WithLabelValues(reason).Inc()
	now := c.o.Now()
	permanent := c.permanent(err)
	msg := err.Error()
	if permanent {
		msg = permanentPrefix + msg
	}
	c.record(files.Record{FileRef: t.ref, ObjectURL: st.ObjectURL, StoredAt: now, Error: msg, Attempts: t.attempts})
	if permanent || t.attempts >= c.o.MaxAttempts {
		c.settle(t.ref, false)
		c.o.Logger.Error("file not copied; left in the index for a later pass",
			"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "file_id", t.ref.FileID, "attempts", t.attempts, "reason", reason, "err", err)
		return false
	}
	c.o.Logger.Warn("file copy failed; will retry",
		"survey_id", t.ref.SurveyID, "response_id", t.ref.ResponseID, "file_id", t.ref.FileID, "attempt", t.attempts, "reason", reason, "err", err)
	t.due = now.Add(c.retryWait(t.attempts))
	c.q.later(t)
	return true
}

// stored counts and records a file that is in the store (copied now or
// found there), and marks it again when its response was deleted while
// the copy ran.
func (c *Copier) stored(t task, st Stored, start time.Time) {
	if st.Skipped {
		c.m.skipped.Inc()
	} else {
		c.m.copied.Inc()
		c.m.bytes.Add(float64(st.Size))
		c.m.duration.Observe(c.o.Now().Sub(start).Seconds())
	}
	c.settle(t.ref, true)
	c.record(files.Record{
		FileRef: t.ref, ObjectURL: st.ObjectURL, FileName: st.FileName, ContentType: st.ContentType,
		Size: st.Size, SHA256: st.SHA256, StoredAt: c.o.Now(), Attempts: t.attempts,
	})
	if c.wasDeleted(t.ref) {
		// The response was deleted while this copy ran: mark (and remove) again.
		c.q.push(task{del: true, ref: files.FileRef{SurveyID: t.ref.SurveyID, ResponseID: t.ref.ResponseID}}, nil)
	}
}

// permanentPrefix starts the recorded error of a failure that asking again
// soon will not fix (404, size cap, …): the index reload waits RetryMax
// before trying such a file again. It is how the index (a table or a JSONL
// file, read back after a restart) keeps the classification.
const permanentPrefix = "permanent: "

func (c *Copier) permanent(err error) bool {
	if errors.Is(err, survey.ErrNotFound) || permanent.Is(err) {
		return true
	}
	return c.o.IsPermanent != nil && c.o.IsPermanent(err)
}

// retryWait is the wait after the n-th failed attempt at a file: the one
// retry schedule (internal/backoff), RetryInitial doubling up to RetryMax,
// with equal jitter. n is the attempt count the index keeps, so the wait
// is the same after a restart.
func (c *Copier) retryWait(n int) time.Duration {
	return backoff.Policy{Initial: c.o.RetryInitial, Max: c.o.RetryMax}.Delay(n)
}

// settle remembers that this run is done with ref: stored, or failed for
// good (then only the index reload retries it, with backoff).
func (c *Copier) settle(ref files.FileRef, stored bool) {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	if len(c.recent) >= maxRecent {
		clear(c.recent)
	}
	c.recent[ref.Key()] = stored
}

func (c *Copier) skipSettled(t task) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	_, ok := c.recent[t.ref.Key()]
	return ok
}

func (c *Copier) skipStored(t task) bool { return c.storedThisRun(t.ref) }

func (c *Copier) storedThisRun(ref files.FileRef) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	return c.recent[ref.Key()]
}
