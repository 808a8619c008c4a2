package blob

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/pipeline/files"
)

// record buffers an index row; Run writes the buffer.
func (c *Copier) record(r files.Record) {
	if c.idx == nil {
		return
	}
	if r.Version == 0 {
		r.Version = c.version(r.StoredAt)
	}
	c.idxMu.Lock()
	if len(c.idxBuf) >= maxIndexBuffer {
		c.idxBuf[0] = files.Record{}
		c.idxBuf = c.idxBuf[1:]
		c.m.failures.WithLabelValues(ReasonIndex).Inc()
	}
	c.idxBuf = append(c.idxBuf, r)
	full := len(c.idxBuf) >= c.o.FlushRows
	c.idxMu.Unlock()
	if full {
		select {
		case c.flushC <- struct{}{}:
		default:
		}
	}
}

// version returns a strictly increasing _version based on t.
func (c *Copier) version(t time.Time) uint64 {
	c.verMu.Lock()
	defer c.verMu.Unlock()
	v := uint64(t.UnixNano())
	if v <= c.lastVer {
		v = c.lastVer + 1
	}
	c.lastVer = v
	return v
}

func (c *Copier) bufferedRows() int {
	c.idxMu.Lock()
	defer c.idxMu.Unlock()
	return len(c.idxBuf)
}

// flush writes the buffered index rows; on failure they stay buffered.
func (c *Copier) flush(ctx context.Context) error {
	if c.idx == nil {
		return nil
	}
	c.idxMu.Lock()
	rows := c.idxBuf
	c.idxBuf = nil
	c.idxMu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	if err := c.idx.Record(ctx, rows); err != nil {
		c.idxMu.Lock()
		c.idxBuf = append(rows, c.idxBuf...)
		c.idxMu.Unlock()
		return err
	}
	return nil
}

// Flush writes the buffered index rows now (tests, shutdown hooks).
func (c *Copier) Flush(ctx context.Context) error { return c.flush(ctx) }
