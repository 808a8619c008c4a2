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
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		return StateUnknown
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return StateStopped
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return StateStopped
	}
	return StateRunning
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
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+SinkStatusPath, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", SinkStatusPath, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
	return st, err
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

// Scrape reads the named unlabelled samples of a Prometheus text page.
func Scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
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
	return out, sc.Err()
}
