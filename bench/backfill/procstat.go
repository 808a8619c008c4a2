package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Where the machine's CPU goes during the backfill besides the daemon:
// ClickHouse's own time, user and system apart (on a VM disk most of it is
// the kernel's, writing parts: docs/benchmarks.md, issue 19), and the whole
// machine's. Linux only; on other systems nothing is reported.

// listenerPID returns the pid of the local process listening on TCP port
// port (0 if none is found or /proc is not readable): the socket's inode
// from /proc/net/tcp{,6}, then the process holding it.
func listenerPID(port int) int {
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st ... uid timeout inode
			if len(fs) > 9 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		file.Close()
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range procs {
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && inodes[l] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
				return pid
			}
		}
	}
	return 0
}

// procTimes is a process's user and system CPU time.
type procTimes struct{ user, sys time.Duration }

func readProcTimes(pid int) procTimes {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return procTimes{}
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procTimes{time.Duration(ut) * time.Second / 100, time.Duration(st) * time.Second / 100} // USER_HZ
}

// machineTimes is the whole machine's CPU time from /proc/stat: busy
// (user, nice, system, irq, softirq) and, of it, system.
type machineTimes struct{ busy, sys time.Duration }

func readMachineTimes() machineTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return machineTimes{}
	}
	n := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / 100
	}
	return machineTimes{busy: n(1) + n(2) + n(3) + n(6) + n(7), sys: n(3) + n(6) + n(7)}
}

// cpuShares follows ClickHouse's and the machine's CPU time over a span.
type cpuShares struct {
	chPID     int
	ch0       procTimes
	machine0  machineTimes
	chD       procTimes
	machineD  machineTimes
	measuring bool
}

// start begins the span; addr is the daemon's ClickHouse (host:port), found
// among the local listeners.
func (c *cpuShares) start(addr string) {
	if _, port, err := net.SplitHostPort(addr); err == nil {
		if p, err := strconv.Atoi(port); err == nil {
			c.chPID = listenerPID(p)
		}
	}
	if c.chPID != 0 {
		c.ch0 = readProcTimes(c.chPID)
	}
	c.machine0 = readMachineTimes()
	c.measuring = true
}

func (c *cpuShares) stop() {
	if !c.measuring {
		return
	}
	if c.chPID != 0 {
		t := readProcTimes(c.chPID)
		c.chD = procTimes{t.user - c.ch0.user, t.sys - c.ch0.sys}
	}
	m := readMachineTimes()
	c.machineD = machineTimes{m.busy - c.machine0.busy, m.sys - c.machine0.sys}
	c.measuring = false
}

func (c *cpuShares) String() string {
	var parts []string
	if c.chPID != 0 {
		parts = append(parts, fmt.Sprintf("ClickHouse (pid %d) user %s, system %s", c.chPID,
			c.chD.user.Round(10*time.Millisecond), c.chD.sys.Round(10*time.Millisecond)))
	}
	if c.machineD.busy > 0 {
		parts = append(parts, fmt.Sprintf("the whole machine busy %s, of which system %s",
			c.machineD.busy.Round(10*time.Millisecond), c.machineD.sys.Round(10*time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}
