package webhookrx

import (
	"container/heap"
	"slices"
	"time"
)

// feeder hands spooled events to the workers. It is owned by the spool loop
// (like the spool).
//
// Memory: only the events handed out (in the work queue or in a worker)
// hold their bodies, at most SpoolMemoryBytes of them (at least one event);
// the other waiting events are index entries, read back from the spool's
// database when their turn comes.
//
// Failures: an event whose Process fails transiently does not hold its
// worker. It is parked behind a gate of its survey: the survey's other
// events are parked too as they come, and once the gate is due (RetryInitial
// doubling to RetryMax per failure in a row, with equal jitter:
// internal/backoff) one of them is
// tried as a probe: the one with the fewest failed attempts, then the
// oldest. When any event of the survey succeeds (or is rejected: the
// processor works, the event was bad), the gate opens: its parked events
// that never failed go before the backlog, those that failed wait for their
// own backoff (the same schedule per attempt of the event), so one event
// that keeps failing neither holds its survey nor is called in a loop.
// Events of other surveys flow meanwhile. During an outage of the sink or
// the API every survey is gated, so the calls made are one probe per survey
// per backoff, not one per waiting event.
type feeder struct {
	r        *Receiver
	sp       *spool
	backlog  seqFIFO          // waiting, never handed out, in spool order
	released seqFIFO          // parked events of reopened gates: before the backlog
	gates    map[int64]*gate  // surveys whose last attempt failed transiently
	due      gateHeap         // gates with no probe in flight, by due time
	retries  retryHeap        // failed events of open gates, by due time
	attempts map[uint64]int   // failed Process calls, for events that failed at least once
	now      func() time.Time // time.Now
}

// gate holds back a survey's events after a transient failure.
type gate struct {
	survey   int64
	failures int       // transient failures in a row
	at       time.Time // when the next probe may start
	probe    uint64    // seq of the probe in flight, 0 when none
	parked   []uint64
	index    int // in the heap, -1 when not in it
}

// newFeeder queues the events left in the spool, in spool order; one that
// failed before the restart waits for the attempt time it was given then.
func newFeeder(r *Receiver, sp *spool, waiting []uint64) *feeder {
	f := &feeder{r: r, sp: sp, gates: map[int64]*gate{}, attempts: sp.attempts, now: time.Now}
	now := f.now()
	for _, seq := range waiting {
		if at, ok := sp.retryAt[seq]; ok && at.After(now) {
			heap.Push(&f.retries, retryItem{due: at, seq: seq})
			continue
		}
		f.backlog.push(seq)
	}
	return f
}

// accepted takes a newly spooled event: straight to the queue (its body is
// at hand) when nothing waits before it and the window has room, else it
// waits (its body is dropped; it is on disk).
func (f *feeder) accepted(ev Event) {
	sp := f.sp.bySeq[ev.Seq]
	if sp == nil {
		return
	}
	if g := f.gates[sp.survey]; g != nil {
		g.parked = append(g.parked, ev.Seq)
		return
	}
	if f.backlog.empty() && f.released.empty() && f.room(sp.size) {
		f.handOut(ev, sp.size)
		return
	}
	f.backlog.push(ev.Seq)
}

// outcome takes a worker's report on one Process attempt.
func (f *feeder) outcome(o outcomeReq) {
	g := f.gates[o.survey]
	if o.done {
		delete(f.attempts, o.seq)
		if g != nil {
			// The survey works again: its parked events go next.
			slices.Sort(g.parked)
			now := f.now()
			for _, seq := range g.parked {
				if n := f.attempts[seq]; n > 0 {
					heap.Push(&f.retries, retryItem{due: now.Add(f.r.retry.Delay(n)), seq: seq})
				} else {
					f.released.push(seq)
				}
			}
			if g.index >= 0 {
				heap.Remove(&f.due, g.index)
			}
			delete(f.gates, o.survey)
		}
		return
	}
	if f.sp.bySeq[o.seq] == nil {
		return
	}
	if f.attempts[o.seq] != o.attempts {
		f.attempts[o.seq] = o.attempts
		f.sp.noteAttempts(o.seq, o.attempts, f.now().Add(f.r.retry.Delay(o.attempts)))
	}
	if g == nil {
		g = &gate{survey: o.survey, index: -1}
		f.gates[o.survey] = g
	}
	g.parked = append(g.parked, o.seq)
	g.failures++
	if g.probe == o.seq {
		g.probe = 0
	}
	if g.probe == 0 {
		g.at = f.now().Add(f.r.retry.Delay(g.failures))
		if g.index >= 0 {
			heap.Fix(&f.due, g.index)
		} else {
			heap.Push(&f.due, g)
		}
	}
}

// room reports whether an event of size bytes fits in the memory window.
func (f *feeder) room(size int64) bool {
	res := f.r.resident.Load()
	return res == 0 || res+size <= f.r.s.SpoolMemoryBytes
}

func (f *feeder) handOut(ev Event, size int64) {
	f.r.resident.Add(size)
	f.r.queue.push(work{ev: ev, size: size, attempts: f.attempts[ev.Seq]})
}

// load reads a waiting event back and hands it out. False when it could
// not be read (it is parked behind a gate of its own and tried later).
func (f *feeder) load(sp *spooled) bool {
	ev, err := f.sp.read(sp.seq)
	if err != nil {
		f.r.s.logger.Error("webhook spool: cannot read an event back; trying again later", "seq", sp.seq, "error", err)
		f.outcome(outcomeReq{seq: sp.seq, survey: sp.survey, attempts: f.attempts[sp.seq]})
		return false
	}
	f.handOut(ev, sp.size)
	return true
}

// maxLoadsPerFill bounds the events one fill reads back from disk, so a
// long backlog does not hold up the spool loop (and the group commits)
// for long; the next tick or worker report goes on.
const maxLoadsPerFill = 1024

// fill hands out, while the memory window has room: the probes of due
// gates, then due retries, then released events, then the backlog.
func (f *feeder) fill() {
	now := f.now()
	loads := 0
	for f.due.Len() > 0 && !f.due[0].at.After(now) {
		g := f.due[0]
		if len(g.parked) == 0 {
			heap.Pop(&f.due)
			delete(f.gates, g.survey)
			continue
		}
		i := f.probeIndex(g.parked)
		sp := f.sp.bySeq[g.parked[i]]
		if sp != nil && !f.room(sp.size) {
			return
		}
		heap.Pop(&f.due)
		g.parked = slices.Delete(g.parked, i, i+1)
		if sp == nil {
			heap.Push(&f.due, g) // done meanwhile: pick another
			continue
		}
		g.probe = sp.seq
		f.load(sp)
	}
	for f.retries.Len() > 0 && !f.retries[0].due.After(now) {
		sp := f.sp.bySeq[f.retries[0].seq]
		if sp == nil {
			heap.Pop(&f.retries)
			continue
		}
		if g := f.gates[sp.survey]; g != nil {
			heap.Pop(&f.retries)
			g.parked = append(g.parked, sp.seq)
			continue
		}
		if !f.room(sp.size) || loads >= maxLoadsPerFill {
			return
		}
		heap.Pop(&f.retries)
		f.load(sp)
		loads++
	}
	for _, q := range []*seqFIFO{&f.released, &f.backlog} {
		for !q.empty() {
			sp := f.sp.bySeq[q.peek()]
			if sp == nil {
				q.pop() // done meanwhile
				continue
			}
			if g := f.gates[sp.survey]; g != nil {
				q.pop()
				g.parked = append(g.parked, sp.seq)
				continue
			}
			if !f.room(sp.size) || loads >= maxLoadsPerFill {
				return
			}
			q.pop()
			f.load(sp)
			loads++
		}
	}
}

// forget drops the state of events marked done.
func (f *feeder) forget(marks []doneMark) {
	for _, m := range marks {
		delete(f.attempts, m.seq)
	}
}

// probeIndex picks the parked event with the fewest failed attempts, then
// the oldest.
func (f *feeder) probeIndex(s []uint64) int {
	m := 0
	for i, v := range s {
		a, b := f.attempts[v], f.attempts[s[m]]
		if a < b || (a == b && v < s[m]) {
			m = i
		}
	}
	return m
}

type retryItem struct {
	due time.Time
	seq uint64
}

type retryHeap []retryItem

func (h retryHeap) Len() int { return len(h) }
func (h retryHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h retryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)   { *h = append(*h, x.(retryItem)) }
func (h *retryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// seqFIFO is a queue of sequence numbers.
type seqFIFO struct {
	items []uint64
	head  int
}

func (q *seqFIFO) empty() bool   { return q.head == len(q.items) }
func (q *seqFIFO) peek() uint64  { return q.items[q.head] }
func (q *seqFIFO) push(s uint64) { q.items = append(q.items, s) }
func (q *seqFIFO) pop() (s uint64) {
	s = q.items[q.head]
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 4096 && q.head*2 > len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return s
}

type gateHeap []*gate

func (h gateHeap) Len() int { return len(h) }
func (h gateHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].survey < h[j].survey
	}
	return h[i].at.Before(h[j].at)
}
func (h gateHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *gateHeap) Push(x any) {
	g := x.(*gate)
	g.index = len(*h)
	*h = append(*h, g)
}
func (h *gateHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.index = -1
	return g
}
