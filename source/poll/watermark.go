package poll

import (
	"sync"
	"time"
)

// window is a closed time range of one stream, paged and submitted.
type window struct {
	from, to  time.Time
	pending   int
	submitted bool // every page listed and submitted
	failed    error
}

// tracker moves a stream's watermark to the end of the highest window whose
// responses, and all before it, are acknowledged.
type tracker struct {
	mu      sync.Mutex
	windows []*window
	mark    time.Time // highest contiguous acknowledged window end
	done    chan struct{}
	err     error

	skipUnchanged bool // refs are re-reads: set pipeline.Ref.SkipUnchanged
}

func (t *tracker) open(from, to time.Time) *window {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := &window{from: from, to: to}
	t.windows = append(t.windows, w)
	return w
}

func (t *tracker) ack(w *window, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.pending--
	if err != nil && w.failed == nil {
		w.failed = err
	}
	t.advance()
}

func (t *tracker) sealed(w *window) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.submitted = true
	t.advance()
}

func (t *tracker) advance() {
	for len(t.windows) > 0 {
		w := t.windows[0]
		if !w.submitted || w.pending > 0 {
			break
		}
		if w.failed != nil {
			if t.err == nil {
				t.err = w.failed
			}
			break
		}
		t.mark = w.to
		t.windows = t.windows[1:]
	}
	select {
	case t.done <- struct{}{}:
	default:
	}
}

func (t *tracker) snapshot() (mark time.Time, open int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	inflight := 0
	for _, w := range t.windows {
		inflight += w.pending
		if !w.submitted {
			inflight++
		}
		if w.failed != nil && err == nil {
			err = w.failed
		}
	}
	return t.mark, inflight, err
}
