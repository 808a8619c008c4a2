package surveyapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

const (
	// DefaultMaxBody bounds one JSON body (a response detail or a list
	// page) read into memory: a 1000-item list page is ~150 KB, a large
	// detail a few MB. A bigger body is refused as a permanent error.
	DefaultMaxBody = 64 << 20
	// DefaultBodyBudget bounds the bytes of all the JSON bodies the
	// client's requests hold at once, so that concurrency × the body
	// limit cannot exhaust memory.
	DefaultBodyBudget = 256 << 20
	// maxErrorBody bounds an error body: only the message is kept.
	maxErrorBody = 64 << 10
	// firstReserve is what a body of unknown length (chunked, or gzip
	// inflated by the transport) reserves before its first byte; it grows
	// past it only through the budget's lane.
	firstReserve = 256 << 10
	// minFirstReserve is the least firstReserve may be scaled down to for a
	// small budget and a high concurrency.
	minFirstReserve = 4 << 10
)

var (
	errBodyTooLarge = errors.New("body too large")
	errBadEncoding  = errors.New("unreadable content encoding")
)

// budget bounds the bytes of the bodies held by all requests in flight: a
// body reserves its bytes before reading them and gives them back once it
// is decoded. Up to first bytes (256 KiB: a detail, a list page) a body
// reserves freely; a bigger one, announced or not, reserves and reads
// holding lane, one body at a time. The lane holder waits only for bodies
// already read (being decoded: they finish) and for bodies holding at most
// first bytes each, which New leaves room for (total >= max +
// MaxConcurrency × first): bodies never wait for each other in a circle.
type budget struct {
	sem   *semaphore.Weighted
	lane  *semaphore.Weighted // weight 1
	total int64
	max   int64 // one body's limit
	first int64
	inUse atomic.Int64 // bytes reserved now
	peak  atomic.Int64 // most bytes ever reserved at once
	bufs  sync.Pool    // of *[poolBuf]byte: the buffers of bodies announced up to poolBuf bytes, reused
}

// poolBuf is the size of the reused body buffers: a detail or a list page
// of up to 64 KiB (most are a few KB) is read into one of them, with no
// allocation; a decoded value never references its body's bytes.
const poolBuf = 64 << 10

// acquire reserves n bytes. When they are not free at once it waits
// (until ctx ends) through w.
func (bg *budget) acquire(ctx context.Context, n int64, w waiter) error {
	if !bg.sem.TryAcquire(n) {
		if err := w.wait(ctx, func(ctx context.Context) error { return bg.sem.Acquire(ctx, n) }); err != nil {
			return err
		}
	}
	v := bg.inUse.Add(n)
	for p := bg.peak.Load(); v > p && !bg.peak.CompareAndSwap(p, v); p = bg.peak.Load() {
	}
	return nil
}

func (bg *budget) release(n int64) {
	bg.inUse.Add(-n)
	bg.sem.Release(n)
}

func newBudget(total, max int64, concurrency int) (*budget, error) {
	if max > total {
		return nil, fmt.Errorf("surveyapi: max body %d bytes exceeds the body budget %d", max, total)
	}
	first := min(int64(firstReserve), (total-max-1)/int64(concurrency))
	if first < minFirstReserve {
		return nil, fmt.Errorf("surveyapi: body budget %d bytes too small for max body %d and concurrency %d: want at least %d",
			total, max, concurrency, max+int64(concurrency)*minFirstReserve)
	}
	return &budget{sem: semaphore.NewWeighted(total), lane: semaphore.NewWeighted(1), total: total, max: max, first: first}, nil
}

// waiter wraps the waits for the budget: the attempt's timeout is for the
// service, so the client's own queue must not count against it.
type waiter struct {
	pause  func() bool // stop the attempt's clock; false: it already ran out
	resume func()      // restart it
}

func (w waiter) wait(ctx context.Context, f func(context.Context) error) error {
	if w.pause != nil && !w.pause() {
		return context.DeadlineExceeded
	}
	err := f(ctx)
	if w.resume != nil {
		w.resume()
	}
	return err
}

// heldBody is a body read under the budget; release gives its bytes back.
type heldBody struct {
	b    []byte
	held int64
	bg   *budget
	pbuf *[poolBuf]byte // the pooled buffer b was cut from, given back on release
}

func (b *heldBody) Bytes() []byte {
	if b == nil {
		return nil
	}
	return b.b
}

func (b *heldBody) release() {
	if b != nil && b.held > 0 {
		b.bg.release(b.held)
		b.held = 0
		b.b = nil
		if b.pbuf != nil {
			b.bg.bufs.Put(b.pbuf)
			b.pbuf = nil
		}
	}
}

// read reads r, whose announced length is length (-1: unknown), keeping
// at most limit bytes. A body announced longer than limit is refused
// without reading a byte; one that turns out longer stops being read at
// limit+1 bytes. Both return errBodyTooLarge. truncate keeps the first
// limit bytes instead (error bodies: only their message matters). The
// waits for the budget end with ctx and go through w. On error nothing
// stays reserved.
//
// Every body reserves up to first bytes freely; beyond that, announced or
// not, it must hold the lane while it reserves and reads. So at any time
// every body but one holds at most first bytes or is past its read (being
// decoded, which ends): the lane holder's wait always ends.
func (bg *budget) read(ctx context.Context, w waiter, r io.Reader, length int64, limit int64, truncate bool) (*heldBody, error) {
	if length > limit && !truncate {
		return nil, errBodyTooLarge
	}
	want := int64(-1) // unknown: grow by doubling
	if length >= 0 {
		want = min(length+1, limit+1) // +1: the Read that sees EOF needs no growth
	}
	first := bg.first
	if want >= 0 {
		first = min(first, want)
	}
	if err := bg.acquire(ctx, first, w); err != nil {
		return nil, err
	}
	out := &heldBody{held: first, bg: bg}
	inLane := false
	defer func() {
		if inLane {
			bg.lane.Release(1)
		}
	}()
	grow := func(to int64) error {
		if !inLane {
			if !bg.lane.TryAcquire(1) {
				if err := w.wait(ctx, func(ctx context.Context) error { return bg.lane.Acquire(ctx, 1) }); err != nil {
					return err
				}
			}
			inLane = true
		}
		if err := bg.acquire(ctx, to-out.held, w); err != nil {
			return err
		}
		out.held = to
		return nil
	}
	if want > first {
		if err := grow(want); err != nil {
			out.release()
			return nil, err
		}
	}
	if length >= 0 && out.held <= poolBuf {
		// Cut to the reservation, so that the body grows (and reserves
		// more) exactly as with a buffer of its own.
		out.pbuf, _ = bg.bufs.Get().(*[poolBuf]byte)
		if out.pbuf == nil {
			out.pbuf = new([poolBuf]byte)
		}
		out.b = out.pbuf[:0:out.held]
	} else {
		out.b = make([]byte, 0, out.held)
	}
	for {
		if len(out.b) == cap(out.b) {
			if int64(cap(out.b)) > limit {
				if truncate {
					out.b = out.b[:limit]
					return out, nil
				}
				out.release()
				return nil, errBodyTooLarge
			}
			if err := grow(min(2*int64(cap(out.b)), limit+1)); err != nil {
				out.release()
				return nil, err
			}
			nb := make([]byte, len(out.b), out.held)
			copy(nb, out.b)
			out.b = nb
		}
		n, err := r.Read(out.b[len(out.b):cap(out.b)])
		out.b = out.b[:len(out.b)+n]
		if err == io.EOF {
			if int64(len(out.b)) > limit {
				if truncate {
					out.b = out.b[:limit]
					return out, nil
				}
				out.release()
				return nil, errBodyTooLarge
			}
			return out, nil
		}
		if err != nil {
			out.release()
			return nil, err
		}
	}
}
