package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// flakyConn fails its first calls as a pooled connection closed under it.
type flakyConn struct {
	driver.Conn
	fails, calls int
}

func (f *flakyConn) Exec(ctx context.Context, query string, args ...any) error {
	f.calls++
	if f.calls <= f.fails {
		return fmt.Errorf("failed to read packet: read tcp: %w", net.ErrClosed)
	}
	return nil
}

func TestRetryClosedConnection(t *testing.T) {
	f := &flakyConn{fails: 1}
	if err := (retryClosed{f}).Exec(context.Background(), "SELECT 1"); err != nil || f.calls != 2 {
		t.Fatalf("err %v after %d calls, want nil after 2", err, f.calls)
	}
	f = &flakyConn{fails: 2}
	if err := (retryClosed{f}).Exec(context.Background(), "SELECT 1"); !errors.Is(err, net.ErrClosed) || f.calls != 2 {
		t.Fatalf("err %v after %d calls, want net.ErrClosed after 2 (one retry)", err, f.calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f = &flakyConn{fails: 1}
	if err := (retryClosed{f}).Exec(ctx, "SELECT 1"); err == nil || f.calls != 1 {
		t.Fatalf("err %v after %d calls: a call whose context ended is not retried", err, f.calls)
	}
}
