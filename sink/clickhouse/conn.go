package clickhouse

import (
	"context"
	"errors"
	"net"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// retryClosed wraps the driver's connection pool: a call that fails because
// the pooled connection it was handed is already closed is made once more,
// on another connection. clickhouse-go closes a connection from a goroutine
// when the context of a batch's Send ends; when that context is cancelled
// right after Send returned (a `defer cancel()`), the goroutine can still
// close the connection after it went back to the pool, and the next call
// on it fails with "use of closed network connection" before anything is
// sent. Nothing reached the server, so the retry is safe; an error after
// the caller's own context ended is returned as it is.
type retryClosed struct{ driver.Conn }

func closedConn(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(err, net.ErrClosed)
}

// PrepareBatch hands the driver a context that follows ctx only while the
// batch is in use: once Send, Abort or Close returned, a later cancel of
// ctx (the caller's `defer cancel()`) no longer reaches the driver, whose
// watchdog would otherwise close the connection after it went back to the
// pool. A call handed a connection closed that way is retried once.
func (c retryClosed) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	b, err := c.prepare(ctx, query, opts)
	if closedConn(ctx, err) {
		b, err = c.prepare(ctx, query, opts)
	}
	return b, err
}

func (c retryClosed) prepare(ctx context.Context, query string, opts []driver.PrepareBatchOption) (driver.Batch, error) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	b, err := c.Conn.PrepareBatch(bctx, query, opts...)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	return &detachedBatch{Batch: b, stop: stop}, nil
}

// detachedBatch stops following the caller's context once it is finished.
type detachedBatch struct {
	driver.Batch
	stop func() bool
}

func (b *detachedBatch) Send() error {
	defer b.stop()
	return b.Batch.Send()
}

func (b *detachedBatch) Abort() error {
	defer b.stop()
	return b.Batch.Abort()
}

func (b *detachedBatch) Close() error {
	defer b.stop()
	return b.Batch.Close()
}

func (c retryClosed) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	r, err := c.Conn.Query(ctx, query, args...)
	if closedConn(ctx, err) {
		r, err = c.Conn.Query(ctx, query, args...)
	}
	return r, err
}

func (c retryClosed) Select(ctx context.Context, dest any, query string, args ...any) error {
	err := c.Conn.Select(ctx, dest, query, args...)
	if closedConn(ctx, err) {
		err = c.Conn.Select(ctx, dest, query, args...)
	}
	return err
}

func (c retryClosed) Exec(ctx context.Context, query string, args ...any) error {
	err := c.Conn.Exec(ctx, query, args...)
	if closedConn(ctx, err) {
		err = c.Conn.Exec(ctx, query, args...)
	}
	return err
}
