package main

import (
	"context"
	"fmt"
	"io"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
)

// doctor prints one line per check of daemon.Doctor, as it is made, and
// exits 1 if any failed.
func doctor(ctx context.Context, cfg *config.Config, stdout io.Writer) int {
	failed := 0
	daemon.Doctor(ctx, cfg, func(c daemon.Check) {
		switch {
		case c.Info != "":
			fmt.Fprintf(stdout, "info  %s\n", c.Info)
		case c.Err == nil:
			fmt.Fprintf(stdout, "ok    %s\n", c.Name)
		default:
			failed++
			fmt.Fprintf(stdout, "FAIL  %s: %v\n      fix: %s\n", c.Name, c.Err, c.Fix)
		}
	})
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return exitFail
	}
	fmt.Fprintln(stdout, "all checks passed")
	return exitOK
}
