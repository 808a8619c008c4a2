package daemon

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/poll"
	"github.com/surveysync/surveysync/survey"
)

// The daemon's continuous verification (verify.interval, verify.sample,
// verify.repair; docs/operations.md, "Verification"). On the leader, after
// the poller's first pass, every interval (stretched by the API budget like
// every poll interval) each polled survey is compared with the warehouse,
// one survey at a time, by the engine of package verify (verifyengine.go):
// counts per stream first, ids only where counts differ, and a random
// sample of current responses read again. What differs is looked at again
// a poll interval later — a response completing while the pass runs is no
// drift — and only what is still different counts: in the gauges (what the
// pass found, before it repaired), in verify_runs, and in the re-reads of
// the repair. The poller's reconcile, the full id comparison on its own
// longer interval, reports into the same figures (reconciled).

// verifyKinds are the values of the drift gauge's kind label.
var verifyKinds = []string{"missing", "extra", "content"}

// finding is what one comparison of a survey found (the engine's result,
// narrowed to what the loop needs).
type finding struct {
	Streams []streamFinding
	Calls   int64 // API calls of the comparison
	Sampled int   // responses whose content was compared
}

// streamFinding is one stream's figures and the ids that differ.
type streamFinding struct {
	Stream             string
	Service, Warehouse int64
	Missing, Extra     []survey.GUID
	Content            []survey.GUID
}

func (f *finding) clean() bool {
	for _, s := range f.Streams {
		if len(s.Missing)+len(s.Extra)+len(s.Content) > 0 {
			return false
		}
	}
	return true
}

// verifierDeps are the verification loop's parts; the daemon wires them
// (newVerifier), tests fake them.
type verifierDeps struct {
	// compare compares one survey (sample: responses whose content is
	// compared, 0 for none).
	compare func(ctx context.Context, surveyID int64, sample int) (finding, error)
	// recheckContent reads the given responses again and returns those
	// whose current rows still differ, with the calls it made.
	recheckContent func(ctx context.Context, surveyID int64, ids []survey.GUID) ([]survey.GUID, int64, error)
	// reread re-reads responses through the pipeline (each with the
	// status of the list that showed it, "" for none) and waits until
	// they are written.
	reread func(ctx context.Context, surveyID int64, ids []survey.GUID, listed []string) error
	// surveys are the surveys to verify (the polled ones).
	surveys func() []int64
	// stretch is the API budget's stretch of every interval (1: none).
	stretch func() float64
	// ready is closed when the poller's first pass is done: before, the
	// warehouse is still being filled.
	ready <-chan struct{}
	// history keeps every pass (verify_runs).
	history warehouse.VerifyLog
}

// verifierOptions are verify.* and the clock.
type verifierOptions struct {
	Interval time.Duration // between passes over every survey
	Sample   int           // responses whose content a pass compares, per survey
	Repair   bool
	// Recheck is how long a difference is given to resolve by itself
	// before it counts (sync.poll_interval).
	Recheck time.Duration
	Streams []string // the streams verified (sync.statuses)
	Now     func() time.Time
	Logger  *slog.Logger
}

// verifier runs the verification loop (run) and records reconcile's
// findings (reconciled).
type verifier struct {
	o verifierOptions
	d verifierDeps
	m *verifyMetrics

	mu    sync.Mutex     // guards shown: record runs in the loop and in reconcile's goroutine
	shown map[int64]bool // surveys with gauges
}

type verifyMetrics struct {
	drift     *prometheus.GaugeVec
	lastClean *prometheus.GaugeVec
	passes    *prometheus.CounterVec
	calls     prometheus.Counter
}

func newVerifyMetrics(reg prometheus.Registerer) *verifyMetrics {
	m := &verifyMetrics{
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_verify_drift_responses",
			Help: "Responses the latest verification pass of a survey found different from the service, before it repaired them, by stream and kind (missing, extra, content).",
		}, []string{"survey_id", "stream", "kind"}),
		lastClean: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "surveysync_verify_last_clean_timestamp_seconds",
			Help: "Unix time of the end of the latest verification pass of a survey that found no difference.",
		}, []string{"survey_id"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surveysync_verify_passes_total",
			Help: "Verification passes of a survey (the daemon's every verify.interval, and reconcile's), by result (clean, drift, error).",
		}, []string{"result"}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surveysync_verify_api_calls_total",
			Help: "API calls of verification passes (lists, details, re-reads of the repair) and of reconcile passes; a part of surveysync_api_requests_total.",
		}),
	}
	for _, r := range []string{warehouse.VerifyClean, warehouse.VerifyDrift, warehouse.VerifyError} {
		m.passes.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.drift, m.lastClean, m.passes, m.calls)
	}
	return m
}

func newVerifierLoop(o verifierOptions, d verifierDeps, reg prometheus.Registerer) *verifier {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if d.stretch == nil {
		d.stretch = func() float64 { return 1 }
	}
	return &verifier{o: o, d: d, m: newVerifyMetrics(reg), shown: map[int64]bool{}}
}

// maxVerifyInterval bounds a stretched interval, as the poller's are.
const maxVerifyInterval = 24 * time.Hour

// run verifies every survey once per interval, the first time an interval
// after the poller's first pass, until ctx ends. A survey
// that cannot be verified is counted (result error) and logged; the loop
// goes on. It returns nil when ctx ends.
func (v *verifier) run(ctx context.Context) error {
	select {
	case <-v.d.ready:
	case <-ctx.Done():
		return nil
	}
	v.seed(ctx)
	for {
		// The first pass comes an interval after the first poll pass:
		// the backfill has just compared every id already.
		wait := time.Duration(float64(v.o.Interval) * max(v.d.stretch(), 1))
		if backoff.Sleep(ctx, min(wait, max(maxVerifyInterval, v.o.Interval))) != nil {
			return nil
		}
		polled := v.d.surveys()
		v.forget(polled)
		for _, id := range polled {
			if ctx.Err() != nil {
				return nil
			}
			v.pass(ctx, id)
		}
	}
}

// seed sets the gauges from the history (the latest pass of every survey
// polled), so that a restart does not show "never clean".
func (v *verifier) seed(ctx context.Context) {
	if v.d.history == nil {
		return
	}
	states, err := v.d.history.VerifyStates(ctx)
	if err != nil {
		v.o.Logger.Warn("verify: the history of passes cannot be read; the gauges start empty", "err", err)
		return
	}
	polled := v.d.surveys()
	for _, st := range states {
		if !slices.Contains(polled, st.SurveyID) {
			continue
		}
		sid := strconv.FormatInt(st.SurveyID, 10)
		v.showing(st.SurveyID)
		if !st.LastClean.IsZero() {
			v.m.lastClean.WithLabelValues(sid).Set(float64(st.LastClean.Unix()))
		}
		for _, r := range st.Latest {
			if r.Result == warehouse.VerifyError {
				continue
			}
			v.setDrift(sid, r.Stream, r.Missing, r.Extra, r.Content)
		}
	}
}

// setDrift sets a stream's three drift gauges (verifyKinds' order).
func (v *verifier) setDrift(sid, stream string, counts ...int64) {
	for i, kind := range verifyKinds {
		v.m.drift.WithLabelValues(sid, stream, kind).Set(float64(counts[i]))
	}
}

// forget removes the gauges of surveys no longer polled (a reload's
// surveys_exclude), so that their last drift does not stay on the
// dashboard and in the alert.
func (v *verifier) forget(polled []int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for id := range v.shown {
		if !slices.Contains(polled, id) {
			sid := strconv.FormatInt(id, 10)
			v.m.drift.DeletePartialMatch(prometheus.Labels{"survey_id": sid})
			v.m.lastClean.DeleteLabelValues(sid)
			delete(v.shown, id)
		}
	}
}

// showing notes that a survey has gauges.
func (v *verifier) showing(id int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.shown[id] = true
}

// pass verifies one survey: compare, look again at what differs a poll
// interval later, count what is still different, record, repair.
func (v *verifier) pass(ctx context.Context, id int64) {
	start := v.o.Now()
	f, err := v.d.compare(ctx, id, v.o.Sample)
	calls := f.Calls
	if err == nil && !f.clean() {
		var again finding
		if backoff.Sleep(ctx, v.o.Recheck) != nil {
			return
		}
		again, err = v.d.compare(ctx, id, 0)
		calls += again.Calls
		if err == nil {
			var n int64
			n, err = v.recheck(ctx, id, &f, &again)
			calls += n
		}
	}
	if ctx.Err() != nil {
		return // a stop is no finding
	}
	if err != nil {
		v.m.calls.Add(float64(calls))
		v.record(ctx, id, warehouse.VerifyCounts, start, f, calls, 0, err)
		v.o.Logger.Warn("verify: the survey could not be verified; tried again at the next pass", "survey_id", id, "err", err)
		return
	}
	var repaired int64
	var rerr error
	if !f.clean() && v.o.Repair {
		ids, listed := rereads(&f)
		repaired = int64(len(ids))
		calls += repaired // one detail call each
		rerr = v.d.reread(ctx, id, ids, listed)
	}
	v.m.calls.Add(float64(calls))
	v.record(ctx, id, warehouse.VerifyCounts, start, f, calls, repaired, nil)
	if !f.clean() {
		missing, extra, content := f.totals()
		args := []any{"survey_id", id, "missing", missing, "extra", extra, "content", content, "api_calls", calls}
		switch {
		case !v.o.Repair:
			v.o.Logger.Warn("verify: the warehouse differs from the service (verify.repair is off: not repaired)", args...)
		case rerr != nil && ctx.Err() == nil:
			v.o.Logger.Warn("verify: the warehouse differs from the service; the repair failed, the next pass tries again", append(args, "err", rerr)...)
		default:
			v.o.Logger.Info("verify: the warehouse differed from the service; the responses were read again", append(args, "repaired", repaired)...)
		}
	}
}

// recheck keeps in f only what again still shows: missing and extra ids
// the second comparison found too (by stream), and content differences a
// second read of the same responses confirms. It returns the calls of
// that read.
func (v *verifier) recheck(ctx context.Context, id int64, f, again *finding) (int64, error) {
	var content []survey.GUID
	for _, s := range f.Streams {
		content = append(content, s.Content...)
	}
	still := map[survey.GUID]bool{}
	var calls int64
	if len(content) > 0 {
		ids, n, err := v.d.recheckContent(ctx, id, content)
		calls = n
		if err != nil {
			return calls, err
		}
		for _, x := range ids {
			still[x] = true
		}
	}
	second := map[string]*streamFinding{}
	for i := range again.Streams {
		second[again.Streams[i].Stream] = &again.Streams[i]
	}
	for i := range f.Streams {
		s := &f.Streams[i]
		o := second[s.Stream]
		if o == nil {
			o = &streamFinding{}
		}
		s.Missing = intersect(s.Missing, o.Missing)
		s.Extra = intersect(s.Extra, o.Extra)
		s.Content = slices.DeleteFunc(s.Content, func(x survey.GUID) bool { return !still[x] })
	}
	return calls, nil
}

func intersect(a, b []survey.GUID) []survey.GUID {
	in := make(map[survey.GUID]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	return slices.DeleteFunc(a, func(x survey.GUID) bool { return !in[x] })
}

func (f *finding) totals() (missing, extra, content int) {
	for _, s := range f.Streams {
		missing += len(s.Missing)
		extra += len(s.Extra)
		content += len(s.Content)
	}
	return missing, extra, content
}

// rereads are the responses a repair reads again, each once: the missing
// and the changed ones with the stream that lists them, the extra ones
// with none (the pipeline writes a deletion when the service answers 404).
func rereads(f *finding) ([]survey.GUID, []string) {
	seen := map[survey.GUID]bool{}
	var ids []survey.GUID
	var listed []string
	add := func(xs []survey.GUID, status string) {
		for _, x := range xs {
			if !seen[x] {
				seen[x] = true
				ids = append(ids, x)
				listed = append(listed, status)
			}
		}
	}
	for _, s := range f.Streams {
		add(s.Missing, s.Stream)
		add(s.Content, s.Stream)
	}
	for _, s := range f.Streams {
		add(s.Extra, "")
	}
	return ids, listed
}

// record sets the gauges and the passes counter and appends the pass to
// the history.
func (v *verifier) record(ctx context.Context, id int64, method string, start time.Time, f finding, calls, repaired int64, err error) {
	end := v.o.Now()
	sid := strconv.FormatInt(id, 10)
	result := warehouse.VerifyClean
	switch {
	case err != nil:
		result = warehouse.VerifyError
	case !f.clean():
		result = warehouse.VerifyDrift
	}
	v.m.passes.WithLabelValues(result).Inc()
	v.showing(id)
	if result == warehouse.VerifyClean {
		v.m.lastClean.WithLabelValues(sid).Set(float64(end.Unix()))
	}
	byStream := map[string]streamFinding{}
	for _, s := range f.Streams {
		byStream[s.Stream] = s
	}
	runs := make([]warehouse.VerifyRun, 0, len(v.o.Streams))
	for i, stream := range v.o.Streams {
		s, ok := byStream[stream]
		r := warehouse.VerifyRun{SurveyID: id, Stream: stream, Method: method, StartedAt: start.UTC(), FinishedAt: end.UTC(),
			Service: -1, Warehouse: -1, Repaired: repaired, PassResult: result, APICalls: calls}
		if i == 0 {
			r.Sampled = int64(f.Sampled)
		}
		if ok {
			r.Service, r.Warehouse = s.Service, s.Warehouse
			r.Missing, r.Extra, r.Content = int64(len(s.Missing)), int64(len(s.Extra)), int64(len(s.Content))
		}
		switch {
		case err != nil:
			r.Result, r.Error = warehouse.VerifyError, err.Error()
		case r.Missing+r.Extra+r.Content > 0:
			r.Result = warehouse.VerifyDrift
		default:
			r.Result = warehouse.VerifyClean
		}
		if err == nil {
			v.setDrift(sid, stream, r.Missing, r.Extra, r.Content)
		}
		runs = append(runs, r)
	}
	if v.d.history == nil {
		return
	}
	if herr := v.d.history.RecordVerifyRuns(context.WithoutCancel(ctx), runs); herr != nil {
		v.o.Logger.Warn("verify: the pass cannot be recorded in the warehouse's history (verify_runs); the gauges show it", "survey_id", id, "err", herr)
	}
}

// reconciled takes what a reconcile pass found (poll.Options.OnReconcile):
// the full id comparison reports into the same figures, with method
// reconcile. Its differences were re-read by the pass itself.
func (v *verifier) reconciled(r poll.ReconcileReport) {
	f := finding{Calls: r.Calls}
	for _, s := range r.Streams {
		// Only the counts are recorded: ids of zero value stand for them.
		f.Streams = append(f.Streams, streamFinding{Stream: s.Stream, Service: s.Service, Warehouse: s.Warehouse,
			Missing: make([]survey.GUID, s.Missing), Extra: make([]survey.GUID, s.Extra)})
	}
	v.m.calls.Add(float64(r.Calls))
	v.record(context.Background(), r.SurveyID, warehouse.VerifyReconcile, r.Started, f, r.Calls, r.Reread, r.Err)
}
