//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// dataFilesystem describes the filesystem holding path (ClickHouse's part
// directory, when ClickHouse runs on this machine): its mount point,
// device and type, and for ext4 whether it has a journal. Without one,
// ext4 checks every free inode it considers for a recent deletion
// (recently_deleted, within dirty_expire_centisecs): each file of a new
// part then costs ClickHouse kernel time in proportion to what was
// deleted in the last 30 s, and on a 2-core machine that time is taken
// from the emulator (docs/benchmarks.md, issue 19). "" if path is not
// here.
func dataFilesystem(path string) string {
	var st unix.Stat_t
	if path == "" || unix.Stat(path, &st) != nil {
		return ""
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 || fs[2] != want {
			continue
		}
		sep := slices.Index(fs, "-")
		if sep < 0 || sep+2 >= len(fs) {
			continue
		}
		fstype, source := fs[sep+1], fs[sep+2]
		desc := fmt.Sprintf("%s on %s (%s", fs[4], source, fstype)
		if fstype == "ext4" {
			task, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(source), "journal_task"))
			switch {
			case err != nil:
				desc += ", journal unknown"
			case strings.TrimSpace(string(task)) == "<none>":
				desc += " without a journal: every file of a part costs kernel time after recent deletions"
			default:
				desc += " with a journal"
			}
		}
		return desc + ")"
	}
	return ""
}
