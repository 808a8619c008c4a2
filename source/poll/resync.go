package poll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

// A resync reads a survey's responses of a date range again and writes
// every one as a new version, whatever the warehouse holds (surveysync
// resync; docs/operations.md "Re-syncing a survey"). It is a job with one
// checkpoint per stream, kept in the state store beside the streams' own
// under the stream name "resync/<stream>/<from>/<to>": its watermark is how
// far the range is rewritten, so a resync interrupted by a stop or a crash
// goes on from there at the next start (the rewrites are idempotent), and
// its last_run_at is set once the stream's range is done. A job ends with a
// reconcile of the survey (with an inventory): a response deleted from the
// service is in no list, and only the comparison of every id finds it.

// errAbandoned ends a resync job of a survey that cannot be read.
var errAbandoned = errors.New("resync abandoned")

// resyncPrefix begins a resync checkpoint's stream name.
const resyncPrefix = "resync/"

// IsResync reports whether a checkpoint's stream name is a resync job's.
func IsResync(stream string) bool { return strings.HasPrefix(stream, resyncPrefix) }

// resyncName is the checkpoint name of a resync of stream over [from, to).
func resyncName(stream string, from, to time.Time) string {
	return resyncPrefix + stream + "/" + from.UTC().Format(time.RFC3339) + "/" + to.UTC().Format(time.RFC3339)
}

// parseResync reads a resync checkpoint's stream name.
func parseResync(name string) (stream string, from, to time.Time, ok bool) {
	parts := strings.Split(strings.TrimPrefix(name, resyncPrefix), "/")
	if !IsResync(name) || len(parts) != 3 {
		return "", time.Time{}, time.Time{}, false
	}
	from, err1 := time.Parse(time.RFC3339, parts[1])
	to, err2 := time.Parse(time.RFC3339, parts[2])
	if err1 != nil || err2 != nil || !to.After(from) {
		return "", time.Time{}, time.Time{}, false
	}
	return parts[0], from, to, true
}

// resyncPending reports whether a resync checkpoint is not done yet.
func resyncPending(st pipeline.StreamState) bool {
	_, _, to, ok := parseResync(st.Stream)
	return ok && st.LastRunAt.Unix() <= 0 && st.Watermark.Before(to)
}

// ResyncJob is a queued resync: a survey's responses completed (partial
// ones: started) in [From, To).
type ResyncJob struct {
	Survey   int64     `json:"survey_id"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Streams  []string  `json:"streams"`  // the checkpoints' names
	Requeued bool      `json:"requeued"` // the same job was pending already
}

// Resync queues a resync of surveyID's responses in [from, to): from zero
// is BackfillFrom, to zero is now less the settle lag. The job is saved in
// the state store before Resync returns, so it is not lost if the process
// stops; a running poller (Run) starts it at once, else RunResyncs or the
// next Run does. Asked again while pending, a job of the same range goes
// on from its checkpoints; once done, it starts from the range's start.
func (p *Poller) Resync(ctx context.Context, surveyID int64, from, to time.Time) (ResyncJob, error) {
	if surveyID <= 0 {
		return ResyncJob{}, fmt.Errorf("resync: survey id %d: must be positive", surveyID)
	}
	if from.IsZero() || from.Before(p.o.BackfillFrom) {
		from = p.o.BackfillFrom
	}
	if to.IsZero() {
		to = p.o.Now().Add(-p.o.SettleLag)
	}
	from, to = from.UTC().Truncate(time.Second), to.UTC().Truncate(time.Second)
	if !to.After(from) {
		return ResyncJob{}, fmt.Errorf("resync survey %d: the range %s to %s is empty (--to must be after --from)",
			surveyID, survey.FormatTime(from), survey.FormatTime(to))
	}
	// One list call: a survey that cannot be read (404, 403) is refused
	// now, not retried every minute.
	if _, err := p.lister.ListResponses(ctx, surveyID, survey.ListQuery{Page: 1, PerPage: 1}); err != nil {
		return ResyncJob{}, fmt.Errorf("resync survey %d: %w", surveyID, err)
	}
	job := ResyncJob{Survey: surveyID, From: from, To: to}
	now := p.o.Now()
	states := make([]pipeline.StreamState, 0, len(p.o.Statuses))
	p.mu.Lock()
	// An interrupted job of the same range (a stream pending) goes on from
	// its checkpoints, its streams done staying done; a job that ended
	// starts again from the range's start.
	for _, stream := range p.o.Statuses {
		name := resyncName(stream, from, to)
		job.Streams = append(job.Streams, name)
		if old, ok := p.state[streamKey{surveyID, name}]; ok && resyncPending(old) {
			job.Requeued = true
		}
	}
	for _, name := range job.Streams {
		if _, ok := p.state[streamKey{surveyID, name}]; ok && job.Requeued {
			continue
		}
		states = append(states, pipeline.StreamState{SurveyID: surveyID, Stream: name, Watermark: from, UpdatedAt: now})
	}
	p.mu.Unlock()
	if len(states) > 0 { // none: every stream's checkpoint is pending already
		if err := p.states.SaveStates(ctx, states); err != nil {
			return ResyncJob{}, fmt.Errorf("resync survey %d: save the job: %w", surveyID, err)
		}
	}
	p.mu.Lock()
	for _, st := range states {
		p.state[streamKey{surveyID, st.Stream}] = st
	}
	p.mu.Unlock()
	p.o.Logger.Info("resync queued", "survey_id", surveyID, "from", survey.FormatTime(from), "to", survey.FormatTime(to))
	select {
	case p.resyncSig <- struct{}{}:
	default:
	}
	return job, nil
}

// RunResyncs loads the checkpoints (when Run has not) and runs every
// pending resync job to its end: the one-shot surveysync resync, without a
// running daemon.
func (p *Poller) RunResyncs(ctx context.Context) error {
	if _, err := p.resume(ctx); err != nil {
		return err
	}
	return p.runPendingResyncs(ctx)
}

// LoadStates loads the streams' checkpoints, so that Resync sees the jobs
// pending already (RunResyncs loads them again).
func (p *Poller) LoadStates(ctx context.Context) error {
	_, err := p.resume(ctx)
	return err
}

// serveResyncs runs the pending resync jobs at start, whenever Resync
// queues one, and a minute after a job failed, until ctx ends.
func (p *Poller) serveResyncs(ctx context.Context) {
	var retry <-chan time.Time
	for {
		retry = nil
		if err := p.runPendingResyncs(ctx); err != nil && ctx.Err() == nil {
			p.o.Logger.Warn("resync failed; tried again in a minute (it goes on from its checkpoint)", "err", err)
			retry = p.o.After(time.Minute)
		}
		select {
		case <-p.resyncSig:
		case <-retry:
		case <-ctx.Done():
			return
		}
	}
}

// runPendingResyncs runs the pending jobs' streams one after the other,
// then reconciles each survey whose job ended, until none is pending.
func (p *Poller) runPendingResyncs(ctx context.Context) error {
	for {
		var keys []streamKey
		p.mu.Lock()
		for k, st := range p.state {
			if resyncPending(st) {
				keys = append(keys, k)
			}
		}
		p.mu.Unlock()
		if len(keys) == 0 {
			return nil
		}
		slices.SortFunc(keys, func(a, b streamKey) int {
			if a.survey != b.survey {
				return int(a.survey - b.survey)
			}
			return strings.Compare(a.stream, b.stream)
		})
		var errs []error
		done := map[int64]bool{}
		for _, k := range keys {
			if err := p.resyncStream(ctx, k); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !errors.Is(err, errAbandoned) {
					errs = append(errs, err)
				}
				done[k.survey] = false
				continue
			}
			if _, failed := done[k.survey]; !failed {
				done[k.survey] = true
			}
		}
		for id, ok := range done {
			if ok && p.inv != nil {
				if err := p.reconcile(ctx, id); err != nil && ctx.Err() == nil {
					// The range is rewritten; deletions wait for the
					// next scheduled reconcile.
					p.o.Logger.Warn("resync: the reconcile after it failed", "survey_id", id, "err", err)
				}
			}
			if ok {
				p.o.Logger.Info("resync done", "survey_id", id)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
}

// resyncStream rewrites one stream of a job from its checkpoint to the
// range's end: every listed response is submitted (none is skipped as
// held or unchanged), and the checkpoint moves as windows are written.
func (p *Poller) resyncStream(ctx context.Context, key streamKey) error {
	st := p.stateOf(key)
	stream, from, to, ok := parseResync(key.stream)
	if !ok {
		return fmt.Errorf("resync checkpoint %q of survey %d: not a resync", key.stream, key.survey)
	}
	start := st.Watermark
	if start.Before(from) {
		start = from
	}
	c := &pass{survey: key.survey, stream: stream, resync: true, start: p.o.Now(),
		tr: &tracker{mark: start, done: make(chan struct{}, 1)}}
	st.Watermark, st.CycleStartedAt, st.LastError = start, c.start, ""
	cs := &cycleState{p: p, key: key, c: c, st: st}
	stopSaver := cs.saveProgress(ctx)
	defer stopSaver()
	err := p.split(ctx, c, start, to, nil)
	err = cs.awaitAcks(ctx, err)
	stopSaver()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st = cs.st
	st.CycleStartedAt, st.CycleListed, st.CycleDone = time.Time{}, 0, 0
	st.Synced += c.synced.Load()
	if err != nil {
		st.LastError = err.Error()
		if p.unreadable(err) {
			// The survey cannot be read any more (deleted, access
			// withdrawn): the job ends, failed, instead of being tried
			// every minute for ever.
			st.LastRunAt = p.o.Now()
			p.save(ctx, key, st)
			p.o.Logger.Error("resync abandoned: the survey cannot be read", "survey_id", key.survey, "stream", stream, "err", err)
			return errAbandoned
		}
		p.save(ctx, key, st)
		return fmt.Errorf("resync survey %d, %s responses from %s to %s: %w", key.survey, stream, survey.FormatTime(from), survey.FormatTime(to), err)
	}
	st.Watermark, st.LastRunAt = to, p.o.Now()
	p.save(ctx, key, st)
	p.o.Logger.Info("resync of a stream done", "survey_id", key.survey, "stream", stream,
		"from", survey.FormatTime(from), "to", survey.FormatTime(to), "rewritten", c.synced.Load())
	return nil
}
