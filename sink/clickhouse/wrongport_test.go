package clickhouse

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// The HTTP interface is told from the native port by their answers to an
// HTTP GET; a closed port is neither.
func TestHTTPPortHint(t *testing.T) {
	native := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if native == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	host, _, _ := net.SplitHostPort(native)
	httpAddr := net.JoinHostPort(host, "8123")
	if c, err := net.DialTimeout("tcp", httpAddr, time.Second); err != nil {
		t.Skipf("no HTTP interface on %s", httpAddr)
	} else {
		c.Close()
	}
	ctx := context.Background()
	if h := httpPortHint(ctx, []string{native}); h != "" {
		t.Errorf("native port %s taken for HTTP: %s", native, h)
	}
	if h := httpPortHint(ctx, []string{native, httpAddr}); !strings.Contains(h, httpAddr+" is ClickHouse's HTTP interface") || strings.Contains(h, native) {
		t.Errorf("hint for %s: %q", httpAddr, h)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	if h := httpPortHint(ctx, []string{closed}); h != "" {
		t.Errorf("closed port: %q", h)
	}
}
