package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/config"
)

const healthcheckUsage = `Usage: surveysync healthcheck [--ready] [--url URL] [--timeout D]

Ask a running daemon on this machine whether it is alive (GET /healthz) or
ready (--ready: GET /readyz); exit 0 if it answers 200, 1 otherwise. For
health checks of images with no shell or curl (the container's HEALTHCHECK).
The address is metrics.listen as SURVEYSYNC_METRICS__LISTEN sets it, else
its default; a wildcard host (0.0.0.0, ::, none) is asked on 127.0.0.1. It
reads no configuration file.

Flags:
`

// healthcheck is the client side of /healthz and /readyz. It loads no
// configuration on purpose: a daemon whose file has a problem is still
// reachable, and a check must not fail on what only the daemon validates.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("healthcheck", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ready := fs.Bool("ready", false, "ask /readyz instead of /healthz")
	url := fs.String("url", "", "the URL to ask (default: http://<metrics.listen>/healthz)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, healthcheckUsage+fs.FlagUsages())
			return exitOK
		}
		fmt.Fprintf(stderr, "surveysync healthcheck: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "surveysync healthcheck: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *url == "" {
		listen := config.Default().Metrics.Listen
		if v, ok := os.LookupEnv("SURVEYSYNC_METRICS__LISTEN"); ok {
			listen = v
		}
		path := "/healthz"
		if *ready {
			path = "/readyz"
		}
		u, err := localURL(listen, path)
		if err != nil {
			fmt.Fprintf(stderr, "surveysync healthcheck: %v\n", err)
			return exitUsage
		}
		*url = u
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "surveysync healthcheck: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "surveysync healthcheck: %v\n", err)
		return exitFail
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "surveysync healthcheck: %s: %s %s\n", *url, resp.Status, msg)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s: %s\n", *url, msg)
	return exitOK
}

// localURL turns a listen address into a URL on this machine.
func localURL(listen, path string) (string, error) {
	if listen == "" {
		return "", fmt.Errorf("metrics.listen is empty: the daemon serves no health endpoints")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("metrics.listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
