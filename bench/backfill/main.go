// Command backfill is the load harness of issue 3: it backfills N responses
// from the emulator (its own process) into ClickHouse with the real
// surveysync binary, measures responses/s, answers/s and the daemon's peak
// RSS, then, in the same run, measures the raw rate of inserting answers rows
// of the same shape with clickhouse-go/v2 alone (the limit).
//
//	go run ./bench/backfill -clickhouse 127.0.0.1:9000 -surveys 10 -responses 100000
//
// With -cluster it backfills into a ClickHouse cluster instead (issue 17):
// -clickhouse then lists every node (comma-separated, the daemon's
// clickhouse.addr), the raw insert is skipped, and after the daemon exits it
// reports the rows on each node (count() of responses_local and
// answers_local, one connection per node) and the replica lag: the time from
// the daemon's exit until SYSTEM SYNC REPLICA has returned on every node and
// every replica's counts equal its peer's.
//
//	go run ./bench/backfill -cluster surveysync_cluster \
//	    -clickhouse 127.0.0.1:9701,127.0.0.1:9702,127.0.0.1:9703,127.0.0.1:9704 -surveys 10 -responses 100000
//
// It builds both binaries into a temp folder and drops its database at the end
// (-keep keeps it).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// options are the harness's flags.
type options struct {
	addrs          []string
	cluster        string
	surveys        int
	responses      int
	fetch, maxRows int
	rawRows        int
	keep           bool
	defaults       bool          // leave fetch/batch/API concurrency at the daemon's defaults
	delay          time.Duration // the service's time to answer a detail (emulator fault "slow")
	ceiling        time.Duration // measure the bare keep-alive client this long, before and after
	ceilingConc    int           // its concurrency (0: the daemon's api.max_concurrency)
	heapDir        string        // write the daemon's heap profiles here
	heapEvery      time.Duration
	pinEmulator    string // taskset CPU list for the emulator ("": not pinned)
	daemonEnv      envList
}

func main() {
	var o options
	addr := flag.String("clickhouse", os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR"), "ClickHouse native address; with -cluster, every node's, comma-separated")
	flag.StringVar(&o.cluster, "cluster", "", "clickhouse.cluster: backfill into this cluster (a name from <remote_servers>)")
	flag.IntVar(&o.surveys, "surveys", 10, "surveys in the emulator")
	flag.IntVar(&o.responses, "responses", 100_000, "responses per survey")
	flag.IntVar(&o.fetch, "fetch-concurrency", 32, "sync.fetch_concurrency (and api.max_concurrency)")
	flag.IntVar(&o.maxRows, "max-rows", 30_000, "sync.batch.max_rows")
	flag.IntVar(&o.rawRows, "raw-rows", 1_000_000, "answers rows inserted by the raw clickhouse-go run (0: skip it)")
	flag.BoolVar(&o.keep, "keep", false, "keep the benchmark database")
	flag.BoolVar(&o.defaults, "defaults", false, "run the daemon at its default settings (no fetch, batch or API concurrency set; api.rate_limit stays 0)")
	flag.DurationVar(&o.delay, "delay", 0, "the emulated service's time to answer each detail (a slow fault on get_response)")
	flag.DurationVar(&o.ceiling, "ceiling", 0, "measure the emulator's ceiling with a bare keep-alive client this long before and after the backfill")
	flag.IntVar(&o.ceilingConc, "ceiling-concurrency", 0, "the bare client's concurrent requests (0: the daemon's api.max_concurrency)")
	flag.StringVar(&o.heapDir, "heap-profiles", "", "a folder to write the daemon's heap profiles to (metrics.pprof on)")
	flag.DurationVar(&o.heapEvery, "heap-every", 5*time.Second, "interval between heap profiles")
	flag.Var(&o.daemonEnv, "daemon-env", "KEY=VALUE added to the daemon's environment only (repeatable), e.g. GOGC=200")
	flag.StringVar(&o.pinEmulator, "pin-emulator", "", "run the emulator on these CPUs (taskset -c, GOMAXPROCS=1); start the harness under taskset -c on the others")
	flag.Parse()
	if *addr == "" {
		log.Fatal("set -clickhouse or SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	}
	for _, a := range strings.Split(*addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.addrs = append(o.addrs, a)
		}
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

func run(o options) error {
	addrs, cluster, surveys, responses, fetch, maxRows, rawRows, keep := o.addrs, o.cluster, o.surveys, o.responses, o.fetch, o.maxRows, o.rawRows, o.keep
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "surveysync-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, b := range []string{"surveysync", "surveysim"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build %s: %w\n%s", b, err, out)
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	simArgs := []string{filepath.Join(dir, "surveysim"), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--surveys", strconv.Itoa(surveys), "--responses", strconv.Itoa(responses), "--token", "bench-token"}
	if o.pinEmulator != "" {
		// The service on a CPU of its own, as the real one is: start the
		// harness under `taskset -c <another>` so that the daemon and
		// the bare client share the rest.
		simArgs = append([]string{"taskset", "-c", o.pinEmulator}, simArgs...)
	}
	simCmd := exec.Command(simArgs[0], simArgs[1:]...)
	if o.pinEmulator != "" {
		simCmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	}
	simCmd.Stderr = os.Stderr
	if err := simCmd.Start(); err != nil {
		return err
	}
	defer func() { _ = simCmd.Process.Kill(); _ = simCmd.Wait() }()
	if err := waitPort(port, 30*time.Second); err != nil {
		return err
	}

	db := fmt.Sprintf("bench_backfill_%d", time.Now().Unix())
	conn, err := ch.Open(&ch.Options{Addr: addrs})
	if err != nil {
		return err
	}
	defer conn.Close()
	var nodes []*node
	if cluster != "" {
		if nodes, err = openNodes(ctx, addrs); err != nil {
			return err
		}
		defer func() {
			for _, n := range nodes {
				if !keep {
					_ = n.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
				}
				n.conn.Close()
			}
		}()
	} else if !keep {
		defer conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	}
	ids := make([]string, surveys)
	for i := range ids {
		ids[i] = strconv.Itoa(4574 + i)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	apiConc := fetch
	tuning := fmt.Sprintf("  max_concurrency: %d\n", fetch)
	syncTuning := fmt.Sprintf("  fetch_concurrency: %d\n  batch:\n    max_rows: %d\n    max_delay: 2s\n", fetch, maxRows)
	if o.defaults {
		apiConc, tuning, syncTuning = surveyapi.DefaultMaxConcurrency, "", ""
	}
	metricsListen := `""`
	var metricsPort int
	if o.heapDir != "" {
		if err := os.MkdirAll(o.heapDir, 0o755); err != nil {
			return err
		}
		if metricsPort, err = freePort(); err != nil {
			return err
		}
		metricsListen = fmt.Sprintf("127.0.0.1:%d\n  pprof: true", metricsPort)
	}
	cfg := fmt.Sprintf(`api:
  base_url: %s/v1
  token: bench-token
  user_agent: "surveysync-bench (bench@example.invalid)"
%s  rate_limit: 0
surveys: [%s]
clickhouse:
  addr: [%s]
  database: %s
  cluster: "%s"
metrics:
  listen: %s
sync:
  settle_lag: 0s
%s`, base, tuning, strings.Join(ids, ", "), strings.Join(addrs, ", "), db, cluster, metricsListen, syncTuning)
	if o.delay > 0 {
		if err := simFault(base, fmt.Sprintf(`{"op":"get_response","kind":"slow","delay":%q}`, o.delay.String())); err != nil {
			return err
		}
		fmt.Printf("emulated service time per detail: %s (a slow fault on get_response)\n", o.delay)
	}
	conc := o.ceilingConc
	if conc <= 0 {
		conc = apiConc
	}
	var ceilings []float64
	var allIDs []string
	if o.ceiling > 0 {
		sids := make([]int64, surveys)
		for i := range sids {
			sids[i] = int64(4574 + i)
		}
		t0 := time.Now()
		if allIDs, err = surveyIDs(ctx, base, "bench-token", sids); err != nil {
			return err
		}
		fmt.Printf("listed the %d responses of the emulator (warming it) in %s\n", len(allIDs), time.Since(t0).Round(time.Millisecond))
	}
	measureCeiling := func(when string) error {
		if o.ceiling <= 0 {
			return nil
		}
		r, err := bareCeiling(ctx, base, "bench-token", allIDs, conc, o.ceiling)
		if err != nil {
			return fmt.Errorf("ceiling %s: %w", when, err)
		}
		ceilings = append(ceilings, r)
		fmt.Printf("emulator's ceiling %s the backfill: a bare keep-alive client, %d concurrent: %.0f details/s\n", when, conc, r)
		return nil
	}
	if err := measureCeiling("before"); err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}

	total := surveys * responses
	target := "single server " + addrs[0]
	if cluster != "" {
		target = fmt.Sprintf("cluster %s (%d nodes)", cluster, len(nodes))
	}
	settings := fmt.Sprintf("fetch_concurrency %d, max_rows %d", fetch, maxRows)
	if o.defaults {
		settings = "the daemon's default settings (api.rate_limit 0)"
	}
	fmt.Printf("backfill into %s: %d surveys × %d responses = %d responses, %s\n", target, surveys, responses, total, settings)
	mem := memPeaks{}
	details := &detailRate{}
	details.sample(base) // the calls so far (the ceiling's) are not the daemon's
	var shares cpuShares
	if cluster == "" && len(addrs) == 1 {
		shares.start(addrs[0])
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(dir, "surveysync"), "run", "--config", cfgPath, "--exit-when-synced")
	cmd.Env = append(os.Environ(), o.daemonEnv...)
	logf, _ := os.Create(filepath.Join(os.TempDir(), "surveysync-bench.log"))
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	heapTick := time.NewTicker(o.heapEvery)
	defer heapTick.Stop()
	if o.heapDir == "" {
		heapTick.Stop()
	}
	nHeap := 0
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("surveysync: %w (log: %s)", err, logf.Name())
			}
			break wait
		case <-tick.C:
			if v := vmHWM(cmd.Process.Pid); v > peak {
				peak = v
			}
			if o.ceiling > 0 || o.delay > 0 {
				details.sample(base)
			}
			if metricsPort != 0 {
				before := mem["go_memstats_next_gc_bytes"]
				mem.sample(metricsPort)
				if after := mem["go_memstats_next_gc_bytes"]; after > before && after > 100e6 {
					// A new peak of the live heap: profile it.
					heapProfile(metricsPort, filepath.Join(o.heapDir, "heap-peak.pb.gz"))
				}
			}
		case <-heapTick.C:
			nHeap++
			heapProfile(metricsPort, filepath.Join(o.heapDir, fmt.Sprintf("heap-%03d.pb.gz", nHeap)))
		}
	}
	elapsed := time.Since(start)
	shares.stop()
	daemonCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	var lag string
	if cluster != "" {
		// First, before anything else loads the nodes: the replicas catch up.
		if lag, err = replicaLag(ctx, nodes, db); err != nil {
			return err
		}
	}
	var nResp, nAns uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".responses_current").Scan(&nResp); err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".answers").Scan(&nAns); err != nil {
		return err
	}
	respRate := float64(nResp) / elapsed.Seconds()
	ansRate := float64(nAns) / elapsed.Seconds()
	fmt.Printf("end to end: %d responses, %d answers rows in %s: %.0f responses/s, %.0f answers/s; daemon peak RSS %d MB\n",
		nResp, nAns, elapsed.Round(time.Millisecond), respRate, ansRate, peak/1024)
	fmt.Printf("CPU time: daemon %s, emulator %s (wall %s, 2 cores = %s)\n",
		(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Round(100*time.Millisecond),
		cpuTime(simCmd.Process.Pid).Round(100*time.Millisecond), elapsed.Round(100*time.Millisecond), (2 * elapsed).Round(100*time.Millisecond))
	if line := shares.String(); line != "" {
		fmt.Printf("CPU time beside the daemon's, over the same span: %s\n", line)
		var partPath string
		if conn.QueryRow(ctx, "SELECT path FROM system.parts WHERE database = '"+db+"' AND table = 'answers' LIMIT 1").Scan(&partPath) == nil {
			if fsys := dataFilesystem(partPath); fsys != "" {
				fmt.Printf("ClickHouse's parts are on %s\n", fsys)
			}
		}
	}
	if up, ok := startedAt(logf.Name()); ok && up.After(start) {
		startup := up.Sub(start)
		fmt.Printf("of which start-up (connect, migrations) %s; after it: %.0f responses/s\n",
			startup.Round(time.Millisecond), float64(nResp)/(elapsed-startup).Seconds())
	}
	if metricsPort != 0 {
		fmt.Printf("daemon's Go memory, peaks (every 100 ms): %s\n", mem)
	}
	fmt.Printf("CPU-seconds per 1,000 responses: daemon %.3f\n", daemonCPU.Seconds()*1000/float64(nResp))
	if o.ceiling > 0 || o.delay > 0 {
		fmt.Printf("daemon's detail calls while backfilling: %s\n", details)
	}
	if err := measureCeiling("after"); err != nil {
		return err
	}
	if len(ceilings) > 0 && details.rate() > 0 {
		sum := 0.0
		for _, c := range ceilings {
			sum += c
		}
		mean := sum / float64(len(ceilings))
		fmt.Printf("ratio: daemon's detail calls/s ÷ the bare client's (mean of %d) = %.0f / %.0f = %.1f %%\n",
			len(ceilings), details.rate(), mean, 100*details.rate()/mean)
	}
	if cluster != "" {
		fmt.Print(lag)
		return rowsPerShard(ctx, nodes, db, nAns)
	}
	if rawRows <= 0 {
		return nil
	}

	raw, err := rawInsert(ctx, conn, db, rawRows)
	if err != nil {
		return err
	}
	fmt.Printf("raw clickhouse-go/v2 columnar insert, same answers shape, 100k-row batches: %.0f rows/s\n", raw)
	fmt.Printf("ratio: end-to-end answers/s ÷ raw insert rows/s = %.2f\n", ansRate/raw)
	return nil
}

// rawInsert inserts n answers rows (of generated responses, flattened by
// hand) into a copy of the answers table, column-wise, 100k rows a batch.
func rawInsert(ctx context.Context, conn driver.Conn, db string, n int) (float64, error) {
	if err := conn.Exec(ctx, "CREATE TABLE "+db+".answers_raw AS "+db+".answers"); err != nil {
		return 0, err
	}
	s, err := sim.New(sim.Options{Surveys: []sim.SurveySpec{{ID: 1, Responses: n/8 + 1000, Seed: 99}}})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	const batchRows = 100_000
	type cols struct {
		rid                                    []uuid.UUID
		sid, pid, qid                          []int64
		pidx, qidx, aidx                       []uint16
		qtype, qtitle, variable                []string
		rowID, colID, choiceID, otherID, value []*int64
		rowL, colL, choiceL, text, status      []string
		completed                              []*time.Time
		version                                []uint64
	}
	var batches []*cols
	c := &cols{}
	rows := 0
	opt := func(v *survey.FlexInt) *int64 {
		if v == nil {
			return nil
		}
		x := int64(*v)
		return &x
	}
	str := func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	}
	for r := range s.Responses(1) {
		var comp *time.Time
		if r.DateCompleted != nil {
			t := r.DateCompleted.Time
			comp = &t
		}
		id := uuid.MustParse(string(r.ResponseID))
		for pi, p := range r.Pages {
			for qi, q := range p.Questions {
				for ai, a := range q.Answers {
					c.rid = append(c.rid, id)
					c.sid = append(c.sid, r.SurveyID)
					c.pid = append(c.pid, p.ID)
					c.pidx = append(c.pidx, uint16(pi))
					c.qid = append(c.qid, q.ID)
					c.qidx = append(c.qidx, uint16(qi))
					c.qtype = append(c.qtype, q.Type)
					c.qtitle = append(c.qtitle, q.Title)
					c.variable = append(c.variable, q.Variable)
					c.aidx = append(c.aidx, uint16(ai))
					c.rowID = append(c.rowID, opt(a.RowID))
					c.rowL = append(c.rowL, str(a.RowLabel))
					c.colID = append(c.colID, opt(a.ColumnID))
					c.colL = append(c.colL, str(a.ColumnLabel))
					c.choiceID = append(c.choiceID, opt(a.ChoiceID))
					c.choiceL = append(c.choiceL, str(a.ChoiceLabel))
					c.otherID = append(c.otherID, opt(a.OtherID))
					c.text = append(c.text, str(a.Text))
					c.value = append(c.value, opt(a.Value))
					c.status = append(c.status, r.ResponseStatus)
					c.completed = append(c.completed, comp)
					c.version = append(c.version, 1)
					rows++
					if len(c.rid) == batchRows {
						batches = append(batches, c)
						c = &cols{}
					}
				}
			}
		}
		if rows >= n {
			break
		}
	}
	if len(c.rid) > 0 {
		batches = append(batches, c)
	}
	start := time.Now()
	for _, c := range batches {
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".answers_raw (response_id, survey_id, page_id, page_index, question_id, question_index, question_type, question_title, variable, answer_index, row_id, row_label, column_id, column_label, choice_id, choice_label, other_id, text, value, response_status, date_completed, _version)")
		if err != nil {
			return 0, err
		}
		for i, col := range []any{c.rid, c.sid, c.pid, c.pidx, c.qid, c.qidx, c.qtype, c.qtitle, c.variable, c.aidx,
			c.rowID, c.rowL, c.colID, c.colL, c.choiceID, c.choiceL, c.otherID, c.text, c.value, c.status, c.completed, c.version} {
			if err := b.Column(i).Append(col); err != nil {
				return 0, fmt.Errorf("raw append column %d: %w", i, err)
			}
		}
		if err := b.Send(); err != nil {
			return 0, err
		}
	}
	return float64(rows) / time.Since(start).Seconds(), nil
}

// startedAt is the time of the daemon's "surveysync started" log line
// (after its migrations).
func startedAt(logPath string) (time.Time, bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `msg="surveysync started"`) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		return t, err == nil
	}
	return time.Time{}, false
}

// cpuTime is the user + system time of a running process (/proc/pid/stat).
func cpuTime(pid int) time.Duration {
	t := readProcTimes(pid)
	return t.user + t.sys
}

func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitPort(port int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("emulator did not listen on %d", port)
}

// envList is a repeatable KEY=VALUE flag.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}
