package clickhouse

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// httpPortProbeTimeout bounds each address's probe.
const httpPortProbeTimeout = 2 * time.Second

// httpPortHint is called when the native connection to addrs failed: it
// asks each address "GET /ping" over plain HTTP. ClickHouse's HTTP
// interface (port 8123 by default) answers "HTTP/1.x 200 … Ok.", which is
// why the native handshake timed out there; the native port answers "400 …
// is for clickhouse-client program". It returns a sentence naming the
// addresses that are HTTP ports, or "" when none is (or none answers).
func httpPortHint(ctx context.Context, addrs []string) string {
	var http []string
	for _, a := range addrs {
		if isHTTPInterface(ctx, a) {
			http = append(http, a)
		}
	}
	if len(http) == 0 {
		return ""
	}
	return fmt.Sprintf("clickhouse.addr %s is ClickHouse's HTTP interface (it answers HTTP; its default port is 8123), "+
		"but surveysync speaks the native protocol: use the native port (tcp_port in the server's config, 9000 by default; 9440 with TLS)",
		strings.Join(http, ", "))
}

// isHTTPInterface reports whether addr answers an HTTP GET /ping with a
// 2xx status: ClickHouse's HTTP interface, not its native port.
func isHTTPInterface(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, httpPortProbeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	host, _, _ := net.SplitHostPort(addr)
	if _, err := fmt.Fprintf(c, "GET /ping HTTP/1.0\r\nHost: %s\r\n\r\n", host); err != nil {
		return false
	}
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil {
		return false
	}
	// "HTTP/1.0 200 OK": the HTTP interface. The native port answers
	// "HTTP/1.0 400 Bad Request" (and says it is for clickhouse-client).
	f := strings.Fields(line)
	return len(f) >= 2 && strings.HasPrefix(f[0], "HTTP/1.") && strings.HasPrefix(f[1], "2")
}
