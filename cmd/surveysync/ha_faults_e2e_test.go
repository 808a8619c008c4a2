package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/internal/testkit/zktest"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// apiCall is one request of one daemon at the emulator.
type apiCall struct {
	who        string
	op         string
	start, end time.Time
}

// apiLog records the emulator's requests per daemon: each daemon gets its
// own listener in front of the one emulator, so the log knows who called.
type apiLog struct {
	mu    sync.Mutex
	calls []apiCall
}

func (l *apiLog) of(op string) []apiCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []apiCall
	for _, c := range l.calls {
		if c.op == op {
			out = append(out, c)
		}
	}
	return out
}

// opPing is the token check (surveyapi.Client.Ping: one response of a
// list, no filter) that every daemon makes at start, followers included
// (issue 20 allows it); it is not leader work.
const opPing = "ping"

// opOf names a request as sim's Calls do.
func opOf(path, rawQuery string) string {
	seg := strings.Split(strings.Trim(strings.TrimPrefix(path, "/v1"), "/"), "/")
	switch {
	case len(seg) == 3 && seg[0] == "surveys" && seg[2] == "responses" && rawQuery == "per_page=1":
		return opPing
	case len(seg) == 3 && seg[0] == "surveys" && seg[2] == "responses":
		return sim.OpListResponses
	case len(seg) == 4 && seg[0] == "surveys" && seg[2] == "responses":
		return sim.OpGetResponse
	case len(seg) == 3 && seg[0] == "distributions" && seg[2] == "contacts":
		return sim.OpCreateContact
	case len(seg) == 5 && seg[0] == "distributions" && seg[4] == "send":
		return sim.OpSendMessage
	}
	return "other"
}

// logAPI gives each daemon its own listener on the emulator (its config's
// api.base_url is rewritten) and returns the log of their requests.
func logAPI(t *testing.T, e *emulator, ds []*haDaemon) *apiLog {
	t.Helper()
	l := &apiLog{}
	h := e.sim.Handler()
	for _, d := range ds {
		who := d.name
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := apiCall{who: who, op: opOf(r.URL.Path, r.URL.RawQuery), start: time.Now()}
			h.ServeHTTP(w, r)
			c.end = time.Now()
			l.mu.Lock()
			l.calls = append(l.calls, c)
			l.mu.Unlock()
		}))
		t.Cleanup(srv.Close)
		b, err := os.ReadFile(d.cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), "base_url: "+e.srv.URL+"/v1", "base_url: "+srv.URL+"/v1", 1)
		if s == string(b) {
			t.Fatal("base_url not found in " + d.cfg)
		}
		if err := os.WriteFile(d.cfg, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// appendConfig adds YAML (top-level keys not already there) to a daemon's
// config.
func appendConfig(t *testing.T, d *haDaemon, yaml string) {
	t.Helper()
	f, err := os.OpenFile(d.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
}

// leaderTerms splits the calls of op, ordered by start, into runs of one
// daemon, and returns the gap at each change of daemon (the next run's
// first start minus the previous run's last end). A negative gap, or more
// runs than the lead changed, means two daemons did leader work at once.
func leaderTerms(calls []apiCall) (runs []string, gaps []time.Duration) {
	slices.SortFunc(calls, func(a, b apiCall) int { return a.start.Compare(b.start) })
	var lastEnd time.Time
	for i, c := range calls {
		if i == 0 || c.who != runs[len(runs)-1] {
			if i > 0 {
				gaps = append(gaps, c.start.Sub(lastEnd))
			}
			runs = append(runs, c.who)
			lastEnd = c.end
			continue
		}
		if c.end.After(lastEnd) {
			lastEnd = c.end
		}
	}
	return runs, gaps
}

// metricValue sums the samples of a metric (every label set) on a daemon's
// metrics listener.
func (h *haDaemon) metricValue(t *testing.T, name string) float64 {
	t.Helper()
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + h.metrics + "/metrics")
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if line != name && !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func outputs(ds []*haDaemon) string {
	var out string
	for _, d := range ds {
		if d.proc != nil {
			out += "---- " + d.name + "\n" + tail(d.proc.output(), 30)
		}
	}
	return out
}

// TestHAFeedPushInterruptedByLeaderKill: a csv_dir feed on a folder both
// daemons share; the leader is SIGKILLed while it pushes a file. The other
// leads, reads the ledger again, resumes the file from processing/ and
// pushes the rest: every contact is created at most once at the service,
// every row ends pushed or uncertain in the ledger, exactly the created ones
// pushed, one send. It logs the gap between the killed leader's last
// create call and the new leader's first (docs/operations.md, fencing).
func TestHAFeedPushInterruptedByLeaderKill(t *testing.T) {
	zk := zktest.Addr(t)
	w := clickhouseOrSkip(t)
	const timeout = 4 * time.Second
	const rows = 600
	e := newEmulator(t, sim.Options{Surveys: specs(1, 20, 61)})
	// About 60 contacts a second (2 calls in flight, 30 ms each): the push
	// of the file takes about 10 s.
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpCreateContact, Kind: sim.FaultSlow, Delay: 30 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ds := haPair(t, e, w, zk, zktest.Root(t), timeout, fmt.Sprintf("sync:\n  poll_interval: 1s\n  settle_lag: 0s\n"+
		"feeds:\n  - name: crm\n    type: csv_dir\n    distribution_id: 7\n    mapping: {email: email}\n    dedupe_key: email\n    interval: 1s\n    concurrency: 2\n"+
		"    csv_dir: {dir: %s}\n    send: {message_id: 5}\n", dir))
	log := logAPI(t, e, ds)
	for _, d := range ds {
		d.proc = startDaemon(t, d.cfg)
	}
	leader := leaderOf(t, ds, 30*time.Second)
	waitConverged(t, e, w, time.Minute)

	var b bytes.Buffer
	b.WriteString("email\n")
	for i := range rows {
		fmt.Fprintf(&b, "kontakt%04d@firma.example\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "contacts.tmp"), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "contacts.tmp"), filepath.Join(dir, "contacts.csv")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(e.sim.Contacts(7)) < rows/4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d contacts 30 s after the file was dropped\n%s", len(e.sim.Contacts(7)), outputs(ds))
		}
	}
	killedAt := time.Now()
	leader.kill(t)
	atKill := len(e.sim.Contacts(7))
	var next *haDaemon
	for _, d := range ds {
		if d != leader {
			next = d
		}
	}
	if l := leaderOf(t, ds, timeout+15*time.Second); l != next {
		t.Fatalf("%s leads, want %s", l.name, next.name)
	}
	restartedAt := time.Now()
	leader.proc = startDaemon(t, leader.cfg) // joins as a follower
	waitDone(t, dir, 1, ds)
	created, ledger := feedState(t, e, w)
	var pushed, uncertain int
	var resolvePushed, resolveRetry []string
	for i := range rows {
		k := fmt.Sprintf("kontakt%04d@firma.example", i)
		n, st := created[k], ledger[k]
		switch {
		case n > 1:
			t.Errorf("%s created %d times", k, n)
		case st == "pushed" && n == 1:
			pushed++
		case st == "uncertain" && n <= 1:
			uncertain++ // resolved below, as docs/feeds.md tells the operator
			if n == 1 {
				resolvePushed = append(resolvePushed, k)
			} else {
				resolveRetry = append(resolveRetry, k)
			}
		default:
			t.Errorf("%s: created %d times, ledger %q", k, n, st)
		}
	}
	if len(created) > rows {
		t.Errorf("%d distinct contacts created, the file has %d", len(created), rows)
	}
	// Uncertain: at most the rows of the chunks whose intents the killed
	// leader had recorded (2 chunks of 100 in flight).
	if uncertain > 200 {
		t.Errorf("%d rows uncertain", uncertain)
	}
	if n := len(e.sim.Sends()); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
	var lastOld, firstNew time.Time
	for _, c := range log.of(sim.OpCreateContact) {
		if c.who == leader.name && c.start.Before(killedAt) && c.end.After(lastOld) {
			lastOld = c.end
		}
		if c.who == next.name && (firstNew.IsZero() || c.start.Before(firstNew)) {
			firstNew = c.start
		}
		if c.who == leader.name && c.start.After(restartedAt) {
			t.Errorf("the restarted %s created a contact as a follower at %v", leader.name, c.start)
		}
	}
	if !firstNew.After(lastOld) {
		t.Errorf("the new leader's first create call (%v) came before the old leader's last ended (%v)", firstNew, lastOld)
	}
	t.Logf("feed push interrupted by a kill: %d rows, %d created before the kill, %d pushed, %d uncertain (%d of them created), 0 created twice; "+
		"old leader's last create call ended %v after the kill, new leader's first %v after it (gap %v)",
		rows, atKill, pushed, uncertain, len(resolvePushed), lastOld.Sub(killedAt).Round(time.Millisecond), firstNew.Sub(killedAt).Round(time.Millisecond),
		firstNew.Sub(lastOld).Round(time.Millisecond))

	// The operator resolves the uncertain rows against the service (the
	// daemons stopped), drops the file again: every row created once.
	for _, d := range ds {
		_ = d.proc.cmd.Process.Signal(syscall.SIGTERM)
		d.proc.wait(t, 30*time.Second)
	}
	for as, keys := range map[string][]string{"pushed": resolvePushed, "retry": resolveRetry} {
		if len(keys) == 0 {
			continue
		}
		args := append([]string{"feed", "resolve", "crm", "--config", ds[0].cfg, "--as", as}, keys...)
		if out, err := exec.Command(binPath, args...).CombinedOutput(); err != nil {
			t.Fatalf("feed resolve --as %s: %v\n%s", as, err, out)
		}
	}
	for _, d := range ds {
		d.proc = startDaemon(t, d.cfg)
	}
	leaderOf(t, ds, 30*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "again.tmp"), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "again.tmp"), filepath.Join(dir, "again.csv")); err != nil {
		t.Fatal(err)
	}
	waitDone(t, dir, 2, ds)
	created, ledger = feedState(t, e, w)
	for i := range rows {
		k := fmt.Sprintf("kontakt%04d@firma.example", i)
		if created[k] != 1 || ledger[k] != "pushed" {
			t.Errorf("after resolving and dropping the file again: %s created %d times, ledger %q", k, created[k], ledger[k])
		}
	}
	if n := len(e.sim.Sends()); n != 2 {
		t.Errorf("%d sends, want 2 (one per file that pushed)", n)
	}
}

// waitDone waits until n reports are in the feed folder's done/.
func waitDone(t *testing.T, dir string, n int, ds []*haDaemon) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, "done", "*.report.json")); len(m) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files not done after 90 s\n%s", n, outputs(ds))
		}
	}
}

// feedState returns the emulator's contacts of distribution 7 (count per
// email) and the ledger's last state per key of feed crm.
func feedState(t *testing.T, e *emulator, w *testWarehouse) (map[string]int, map[string]string) {
	t.Helper()
	created := map[string]int{}
	for _, c := range e.sim.Contacts(7) {
		created[strings.ToLower(c.Contact.Email)]++
	}
	ledger := map[string]string{}
	q := fmt.Sprintf("SELECT key, argMax(state, _version) FROM %s.pushed_contacts WHERE feed = 'crm' GROUP BY key", w.db)
	rs, err := w.conn.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var k, s string
		if err := rs.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		ledger[strings.ToLower(k)] = s
	}
	return created, ledger
}

// zkPid is the process id of a private ZooKeeper (zookeeper-up.sh writes it).
func zkPid(t *testing.T, s *zktest.Server) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Dir, "zookeeper.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestHAZooKeeperPausedOrRestarted: two daemons on a private ZooKeeper
// during a backfill. ZooKeeper is paused (SIGSTOP of its java process, past
// the session timeout), the leader is then stopped and started again (a
// graceful handover), and ZooKeeper is stopped and started again. From the
// emulator's request log: the list calls of the two daemons never
// interleave (each change of daemon has a positive gap and follows a
// change of leader), a leader lists again after each fault, and the
// warehouse ends exact.
func TestHAZooKeeperPausedOrRestarted(t *testing.T) {
	zs := zktest.Start(t)
	w := clickhouseOrSkip(t)
	const timeout = 4 * time.Second
	e := newEmulator(t, sim.Options{Surveys: specs(2, 3000, 67)})
	ds := haPair(t, e, w, zs.Addr, zktest.Root(t), timeout,
		"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  batch:\n    max_rows: 500\n    max_delay: 200ms\n")
	log := logAPI(t, e, ds)
	t.Setenv("SURVEYSYNC_API__RATE_LIMIT", "300") // a backfill the faults land in
	for _, d := range ds {
		d.proc = startDaemon(t, d.cfg)
	}
	leaderOf(t, ds, 30*time.Second)
	waitRows(t, w, ds[0].proc, 300, time.Minute)

	// Work resumes: a leader lists again after ZooKeeper is back.
	resumes := func(what string) {
		t.Helper()
		t0 := time.Now()
		l := leaderOf(t, ds, 30*time.Second)
		for {
			var after bool
			for _, c := range log.of(sim.OpListResponses) {
				after = after || (c.who == l.name && c.start.After(t0))
			}
			if after {
				break
			}
			if time.Since(t0) > 45*time.Second {
				t.Fatalf("after %s: no list call for 45 s\n%s", what, outputs(ds))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("after %s: %s lists again %v later", what, l.name, time.Since(t0).Round(10*time.Millisecond))
	}

	pid := zkPid(t, zs)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	time.Sleep(2*timeout + time.Second)
	// Paused past the session timeout: no daemon may lead now.
	for _, d := range ds {
		if s, err := d.status(); err == nil && s.Leading {
			t.Errorf("%s still leads %v after ZooKeeper was paused", d.name, 2*timeout+time.Second)
		}
	}
	cont()
	resumes("a pause of ZooKeeper")

	// A graceful handover in between (SIGTERM of the leader, started again
	// as a follower), so that the log holds at least one change of daemon
	// whatever ZooKeeper's faults decide.
	l := leaderOf(t, ds, 10*time.Second)
	// The others must be campaigning again (after the pause their sessions
	// may have expired, and an elector starts again after 5 s): a follower
	// that knows the leader takes over as soon as it leaves.
	for deadline := time.Now().Add(30 * time.Second); ; {
		following := true
		for _, d := range ds {
			if s, err := d.status(); d != l && (err != nil || s.Leading || s.Leader != l.name) {
				following = false
			}
		}
		if following {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the followers do not follow %s 30 s after ZooKeeper resumed", l.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = l.proc.cmd.Process.Signal(syscall.SIGTERM)
	l.proc.wait(t, 60*time.Second)
	// Another daemon leads and lists before the stopped one comes back:
	// restarted at once, it could win the election again while a follower
	// was still in its elector's 5 s restart (the lead then never moved;
	// seen once in CI).
	resumes("a handover")
	l.proc = startDaemon(t, l.cfg)

	time.Sleep(2 * time.Second)
	zs.Stop(t)
	time.Sleep(timeout + 2*time.Second)
	for _, d := range ds {
		if s, err := d.status(); err == nil && s.Leading {
			t.Errorf("%s still leads %v after ZooKeeper stopped", d.name, timeout+2*time.Second)
		}
	}
	zs.Restart(t)
	resumes("a restart of ZooKeeper")

	waitConverged(t, e, w, 3*time.Minute)
	var changes float64
	for _, d := range ds {
		changes += d.metricValue(t, "surveysync_ha_leader_changes_total")
	}
	pings := map[string]int{}
	for _, c := range log.of(opPing) {
		pings[c.who]++
	}
	t.Logf("token checks (not counted as leader work): %v", pings)
	runs, gaps := leaderTerms(log.of(sim.OpListResponses))
	t.Logf("list calls: %d runs of one daemon %v, %.0f leader changes, gaps between runs %v", len(runs), runs, changes, gaps)
	for i, g := range gaps {
		if g <= 0 {
			t.Errorf("%s listed while %s was still listing (run %d, overlap %v)", runs[i+1], runs[i], i+1, -g)
		}
	}
	if len(runs) < 2 {
		t.Errorf("list calls of one daemon only (%v): the handover did not move the lead", runs)
	}
	if float64(len(runs)) > changes {
		t.Errorf("%d runs of list calls but %.0f leader changes: two daemons listed in turn", len(runs), changes)
	}
}

// TestHAWebhooksSpreadAndDuplicated: a load balancer in front of two
// daemons sends each webhook delivery to one of them, and every third to
// both. Every response ends once in the warehouse (exact), both daemons
// processed webhooks (each fetched details), the follower listed nothing.
// The http feed's listener is open on the leader only (docs/operations.md).
func TestHAWebhooksSpreadAndDuplicated(t *testing.T) {
	zk := zktest.Addr(t)
	w := clickhouseOrSkip(t)
	const timeout = 4 * time.Second
	path := "/hooks/ha-" + randHex(12)
	var delivered [2]atomic.Int64
	var targets [2]string
	var n atomic.Int64
	lb := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		i := n.Add(1)
		to := []int{int(i % 2)}
		if i%3 == 0 {
			to = []int{0, 1}
		}
		status := http.StatusBadGateway
		for _, k := range to {
			req, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+targets[k]+r.URL.RequestURI(), bytes.NewReader(body))
			req.Header = r.Header.Clone()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			delivered[k].Add(1)
			if resp.StatusCode < 300 || status >= 300 {
				status = resp.StatusCode
			}
		}
		rw.WriteHeader(status)
	}))
	defer lb.Close()
	e := newEmulator(t, sim.Options{Surveys: specs(1, 30, 71),
		WebhookURL: lb.URL + path, WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	ds := haPair(t, e, w, zk, zktest.Root(t), timeout,
		"sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\n  batch:\n    max_delay: 100ms\n")
	log := logAPI(t, e, ds)
	feedPorts := map[string]string{}
	for k, d := range ds {
		targets[k] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		feedPorts[d.name] = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		appendConfig(t, d, fmt.Sprintf("webhooks:\n  enabled: true\n  listen: %s\n  path: %s\n  spool_dir: %s\n"+
			"feeds:\n  - name: web\n    type: http\n    distribution_id: 2\n    mapping: {email: email}\n    http: {listen: %q, token: feed-token-0123456789abcdef}\n",
			targets[k], path, t.TempDir(), feedPorts[d.name]))
		d.proc = startDaemon(t, d.cfg)
	}
	leader := leaderOf(t, ds, 30*time.Second)
	waitConverged(t, e, w, time.Minute)

	// The feed listens on the leader only; the leader check a load
	// balancer in front of it uses says who.
	for _, d := range ds {
		c, err := net.DialTimeout("tcp", feedPorts[d.name], time.Second)
		if c != nil {
			c.Close()
		}
		if open := err == nil; open != (d == leader) {
			t.Errorf("%s (leader %v): feed listener open %v", d.name, d == leader, open)
		}
		want := http.StatusServiceUnavailable
		if d == leader {
			want = http.StatusOK
		}
		resp, err := http.Get("http://" + d.metrics + daemon.HALeaderPath)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s (leader %v): %s answers %s", d.name, d == leader, daemon.HALeaderPath, resp.Status)
		}
	}

	lists := len(log.of(sim.OpListResponses))
	for range 30 {
		now := time.Now().UTC().Add(-2 * time.Minute)
		if _, err := e.sim.AddResponse(e.ids[0], survey.Response{ResponseStatus: survey.StatusCompleted,
			DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)}); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(t, e, w, time.Minute)
	var dup int64
	q := fmt.Sprintf("SELECT count() - uniqExact(response_id) FROM %s.responses_current", w.db)
	if err := w.conn.QueryRow(context.Background(), q).Scan(&dup); err != nil || dup != 0 {
		t.Errorf("responses_current: %d responses more than once (%v)", dup, err)
	}
	gets := map[string]int{}
	for _, c := range log.of(sim.OpGetResponse) {
		gets[c.who]++
	}
	for k, d := range ds {
		if delivered[k].Load() == 0 || gets[d.name] == 0 {
			t.Errorf("%s: %d deliveries, %d detail fetches; want both > 0", d.name, delivered[k].Load(), gets[d.name])
		}
	}
	for _, c := range log.of(sim.OpListResponses)[lists:] {
		if c.who != leader.name {
			t.Errorf("follower %s listed at %v", c.who, c.start)
		}
	}
	t.Logf("webhooks: %d deliveries to a, %d to b (every third to both), detail fetches %v; every response once", delivered[0].Load(), delivered[1].Load(), gets)
}
