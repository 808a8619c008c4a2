package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time by release builds (mk/deploy.mk):
//
//	-ldflags "-X main.version=v1.2.3 -X main.commit=<sha> -X main.buildDate=<RFC 3339>"
//
// Left empty, they come from the build information the go command embeds:
// the module version, and the VCS revision and commit time of a checkout.
// The build date of a release is its commit's date, so that the same
// source builds to the same bytes (-trimpath; docs/deployment.md).
var (
	version   = ""
	commit    = ""
	buildDate = ""
)

// buildInfo is what `surveysync version` prints and the build_info metric
// carries.
type buildInfo struct {
	Version, Commit, Date, GoVersion string
	Modified                         bool // built from a checkout with uncommitted changes
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: buildDate, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b.withDefaults()
	}
	if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.time":
			if b.Date == "" {
				b.Date = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b.withDefaults()
}

func (b buildInfo) withDefaults() buildInfo {
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// versionString is one line: surveysync v1.2.3 (commit 0123abc, built
// 2026-11-26T08:37:00Z, go1.26.8 linux/amd64).
func versionString() string {
	b := readBuildInfo()
	c := b.Commit
	if b.Modified && !strings.HasSuffix(c, "-dirty") {
		c += "-dirty"
	}
	return fmt.Sprintf("surveysync %s (commit %s, built %s, %s %s/%s)", b.Version, c, b.Date, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
