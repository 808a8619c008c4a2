package blob

import (
	"context"
	"sync"
	"time"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// task is one unit of work of the copier: copy a file, or mark a deleted
// response's files.
type task struct {
	ref      files.FileRef // FileID empty for a deletion
	del      bool
	attempts int // failed attempts so far (carried from the index on reload)
	due      time.Time
}

func (t task) key() string {
	if t.del {
		return "delete:" + files.FileRef{SurveyID: t.ref.SurveyID, ResponseID: t.ref.ResponseID}.Key()
	}
	return t.ref.Key()
}

// queue is the copier's bounded work list. A key is held from push until
// done, so the same file is never queued or copied twice at once. Tasks
// waiting for a retry sit in delayed until their time comes.
type queue struct {
	mu      sync.Mutex
	ready   []task
	delayed []task
	held    map[string]bool
	max     int
	wake    chan struct{}
	onDepth func(int)
}

func newQueue(max int, onDepth func(int)) *queue {
	return &queue{held: map[string]bool{}, max: max, wake: make(chan struct{}, 1), onDepth: onDepth}
}

// push adds t unless it is already held or skip (when not nil) says so;
// skip runs under the queue's lock, after the held check, so a task that
// finishes concurrently is seen either held or by skip. It reports false
// when the queue is full (t was not added).
func (q *queue) push(t task, skip func(task) bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := t.key()
	if q.held[k] || (skip != nil && skip(t)) {
		return true
	}
	if len(q.ready)+len(q.delayed) >= q.max && !t.del {
		return false
	}
	q.held[k] = true
	q.ready = append(q.ready, t)
	q.changed()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// room is how many more tasks fit.
func (q *queue) room() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.max - len(q.ready) - len(q.delayed)
}

// later puts a popped (still held) task back to run at t.due.
func (q *queue) later(t task) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.delayed = append(q.delayed, t)
	q.changed()
}

// promote moves the delayed tasks that are due to ready.
func (q *queue) promote(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	keep := q.delayed[:0]
	moved := false
	for _, t := range q.delayed {
		if !t.due.After(now) {
			q.ready = append(q.ready, t)
			moved = true
		} else {
			keep = append(keep, t)
		}
	}
	clear(q.delayed[len(keep):])
	q.delayed = keep
	if moved {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// pop waits for a ready task. The task stays held until done.
func (q *queue) pop(ctx context.Context) (task, bool) {
	for {
		q.mu.Lock()
		if len(q.ready) > 0 {
			t := q.ready[0]
			q.ready[0] = task{}
			q.ready = q.ready[1:]
			if len(q.ready) == 0 {
				q.ready = nil // let the backing array go
			} else {
				// another worker may take the next one
				select {
				case q.wake <- struct{}{}:
				default:
				}
			}
			q.changed()
			q.mu.Unlock()
			return t, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return task{}, false
		}
	}
}

// done releases t's key.
func (q *queue) done(t task) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.held, t.key())
}

// drain removes and returns every waiting task (at shutdown).
func (q *queue) drain() []task {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := append(q.ready, q.delayed...)
	q.ready, q.delayed = nil, nil
	for _, t := range out {
		delete(q.held, t.key())
	}
	q.changed()
	return out
}

// dropResponse removes waiting copy tasks of a response (it was deleted).
func (q *queue) dropResponse(surveyID int64, responseID survey.GUID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	filter := func(ts []task) []task {
		keep := ts[:0]
		for _, t := range ts {
			if !t.del && t.ref.SurveyID == surveyID && t.ref.ResponseID == responseID {
				delete(q.held, t.key())
				continue
			}
			keep = append(keep, t)
		}
		clear(ts[len(keep):])
		return keep
	}
	q.ready = filter(q.ready)
	q.delayed = filter(q.delayed)
	q.changed()
}

func (q *queue) changed() {
	if q.onDepth != nil {
		q.onDepth(len(q.ready) + len(q.delayed))
	}
}
