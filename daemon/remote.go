package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/ha"
	"github.com/surveysync/surveysync/pipeline"
)

// The client side of the daemon's metrics listener: what surveysync status
// and doctor ask a running daemon (metrics.go serves it).

// State is whether a daemon answers on metrics.listen.
type State int

const (
	StateUnknown State = iota // metrics.listen is off: cannot tell
	StateRunning
	StateStopped // nothing answers on metrics.listen
)

// Probe asks the daemon's metrics listener for /healthz.
func Probe(ctx context.Context, cfg *config.Config) State {
	addr := Addr(cfg)
	if addr == "" {
		return StateUnknown
	}
	if err := ask(ctx, addr, "/healthz", func(io.Reader) error { return nil }); err != nil {
		return StateStopped
	}
	return StateRunning
}

// NotReady asks the daemon's /readyz: "" when it answers ready (or does
// not answer), else what it says it waits for, e.g. a migration waiting for
// a cluster node (startup.go).
func NotReady(ctx context.Context, addr string) string {
	if addr == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
	return strings.TrimSpace(string(b))
}

// ask GETs path from the daemon's metrics listener at addr, within
// askTimeout, and hands the body of a 200 answer to read.
func ask(ctx context.Context, addr, path string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return read(resp.Body)
}

// askTimeout bounds each question to the running daemon: it answers from
// memory, so a slow answer means it is not there (or stuck).
const askTimeout = 2 * time.Second

// askJSON decodes the JSON answer of path (at most 1 MiB) into v.
func askJSON(ctx context.Context, addr, path string, v any) error {
	return ask(ctx, addr, path, func(r io.Reader) error { return json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(v) })
}

// RoundDuration is a duration as the commands print it: seconds under a
// minute, minutes under two days, else days.
func RoundDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Truncate(time.Second).String()
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// Addr is where status and doctor find the running daemon: its
// metrics listener, with a wildcard host replaced by loopback; "" when
// metrics.listen is off or unreadable.
func Addr(cfg *config.Config) string {
	if cfg.Metrics.Listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(cfg.Metrics.Listen)
	if err != nil {
		return ""
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// SinkStatusPath serves the running daemon's pipeline.WriteStatus as JSON
// on its metrics listener, beside /metrics.
const SinkStatusPath = "/status/sink"

// RemoteWrites reads the running daemon's write status from its metrics
// listener.
func RemoteWrites(ctx context.Context, addr string) (pipeline.WriteStatus, error) {
	var st pipeline.WriteStatus
	err := askJSON(ctx, addr, SinkStatusPath, &st)
	return st, err
}

// RemoteHA reads the election's state from the daemon whose metrics
// listener is at addr (surveysync status).
func RemoteHA(ctx context.Context, addr string) (ha.Status, error) {
	var s ha.Status
	if addr == "" {
		return s, fmt.Errorf("metrics.listen is empty")
	}
	err := askJSON(ctx, addr, HAStatusPath, &s)
	return s, err
}

// RefusalText is a failing write in one line: where, the server's code
// and message.
func RefusalText(cfg *config.Config, st pipeline.WriteStatus) string {
	table := st.Table
	if table == "" {
		table = "(not named by the sink)"
	} else if len(cfg.ClickHouse.Addr) > 0 {
		table = cfg.ClickHouse.Database + "." + table
	}
	verb := "writes to " + table + " fail (transient: the sink is unreachable or overloaded; it heals by itself)"
	if st.Class == pipeline.WriteRefused {
		verb = "the warehouse refuses writes to " + table
	}
	code := ""
	if st.Code != 0 {
		code = fmt.Sprintf("code %d: ", st.Code)
	}
	return fmt.Sprintf("%s: %s%s", verb, code, st.Message)
}

// Scrape reads the named unlabelled samples of the Prometheus page of the
// daemon whose metrics listener is at addr.
func Scrape(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	err := ask(ctx, addr, "/metrics", func(r io.Reader) error {
		sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			if !ok || !slices.Contains(names, name) {
				continue
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				out[name] = f
			}
		}
		return sc.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
