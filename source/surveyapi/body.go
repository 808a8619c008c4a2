package surveyapi

import (
	"context"
	"errors"
	"fmt"
	"io"

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
// is decoded. A body whose length is announced reserves it whole up front
// (holding nothing while it waits); a body of unknown length reserves first
// bytes and grows past them only through lane, one body at a time. A
// grower waits only for bodies that need nothing more (they finish) and for
// lane waiters holding at most first bytes each, which New leaves room for
// (total >= max + MaxConcurrency × first): bodies never wait for each other
// in a circle.
type budget struct {
	sem   *semaphore.Weighted
	lane  *semaphore.Weighted // weight 1
	total int64
	max   int64 // one body's limit
	first int64
}

func newBudget(total, max int64, concurrency int) (*budget, error) {
	if max > total {
		return nil, fmt.Errorf("surveyapi: max body %d bytes exceeds the body budget %d", max, total)
	}
	first := min(int64(firstReserve), (total-max)/int64(concurrency))
	if first < minFirstReserve {
		return nil, fmt.Errorf("surveyapi: body budget %d bytes too small for max body %d and concurrency %d: want at least %d",
			total, max, concurrency, max+int64(concurrency)*minFirstReserve)
	}
	return &budget{sem: semaphore.NewWeighted(total), lane: semaphore.NewWeighted(1), total: total, max: max, first: first}, nil
}

// heldBody is a body read under the budget; release gives its bytes back.
type heldBody struct {
	b    []byte
	held int64
	bg   *budget
}

func (b *heldBody) Bytes() []byte {
	if b == nil {
		return nil
	}
	return b.b
}

func (b *heldBody) release() {
	if b != nil && b.held > 0 {
		b.bg.sem.Release(b.held)
		b.held = 0
		b.b = nil
	}
}

// read reads r, whose announced length is length (-1: unknown), keeping
// at most limit bytes. A body announced longer than limit is refused
// without reading a byte; one that turns out longer stops being read at
// limit+1 bytes. Both return errBodyTooLarge. truncate keeps the first
// limit bytes instead (error bodies: only their message matters). The
// waits for the budget end with ctx. On error nothing stays reserved.
func (bg *budget) read(ctx context.Context, r io.Reader, length int64, limit int64, truncate bool) (*heldBody, error) {
	if length > limit && !truncate {
		return nil, errBodyTooLarge
	}
	want := bg.first
	if length >= 0 {
		want = length + 1 // +1: the Read that sees EOF needs no growth
	}
	want = min(want, limit+1)
	if err := bg.sem.Acquire(ctx, want); err != nil {
		return nil, err
	}
	out := &heldBody{b: make([]byte, 0, want), held: want, bg: bg}
	inLane := false
	defer func() {
		if inLane {
			bg.lane.Release(1)
		}
	}()
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
			if !inLane {
				if err := bg.lane.Acquire(ctx, 1); err != nil {
					out.release()
					return nil, err
				}
				inLane = true
			}
			grow := min(2*int64(cap(out.b)), limit+1)
			if err := bg.sem.Acquire(ctx, grow-out.held); err != nil {
				out.release()
				return nil, err
			}
			nb := make([]byte, len(out.b), grow)
			copy(nb, out.b)
			out.b, out.held = nb, grow
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
