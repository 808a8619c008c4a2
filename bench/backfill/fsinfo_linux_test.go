//go:build linux

package main

import (
	"os"
	"strings"
	"testing"
)

func TestDataFilesystemNamesTheMount(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc/self/mountinfo here")
	}
	got := dataFilesystem(t.TempDir())
	if got == "" || !strings.Contains(got, " on ") || !strings.HasSuffix(got, ")") {
		t.Fatalf("dataFilesystem(a temporary directory) = %q, want \"<mount point> on <device> (<type>…)\"", got)
	}
	if strings.Contains(got, "(ext4") && !strings.Contains(got, "journal") {
		t.Errorf("an ext4 filesystem without its journal's state: %q", got)
	}
	for _, p := range []string{"", "/no/such/path/surveysync"} {
		if got := dataFilesystem(p); got != "" {
			t.Errorf("dataFilesystem(%q) = %q, want \"\"", p, got)
		}
	}
}
