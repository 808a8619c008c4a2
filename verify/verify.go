// Package verify compares what the survey service lists with what the
// warehouse holds as current, survey by survey and stream by stream
// (completed, disqualified, quotafull, partial), and finds the responses
// that differ: the use case of `surveysync verify` and of the daemon's
// verification passes. The backends implement only the narrow read it
// needs (warehouse.VerifyReader); the API calls go through the caller's
// client (the shared surveyapi.Client, so they count in api.monthly_budget).
//
// # How a pass works
//
// Counts first. For each stream, one list call with per_page 1000 gives the
// service's total (the list answer's total) up to Options.Until, and the
// warehouse counts its current responses of the same statuses and dates. Where
// the counts agree the stream is taken as equal (offsetting errors — one
// missing and one phantom in the same stream and range — are the full id
// comparison's to find: the poller's reconcile). Where they differ, the range is
// bisected with the list's date filters (end_completed_at/start_completed_at;
// start_started_at/end_started_at for partial, which the service lists by
// start), at the warehouse's median date, one list call per stream for one
// half (the other half's total is the parent's less it), down to ranges whose
// list fits one page: there the ids are compared. Where many differences
// are scattered over a range of few pages, paging it is cheaper and the
// range is paged instead. So a clean pass costs one list call per stream,
// and d differences in c clusters cost O(c·log n) list calls, never much
// more than a full listing. Ranges are half-open, [from, to), whole seconds, sent as
// start = from and end = to − 1 ns (the emulator's bounds are inclusive; the
// service does not say).
//
// The service's quirk: a response listed as quotafull has the detail status
// disqualified. The disqualified and quotafull streams are therefore compared
// together (their totals against the warehouse's disqualified and quotafull
// responses); at the ids, a response listed as quotafull matches a current
// row of either status and counts in quotafull, the stream that listed it. Its
// warehouse figure is then Service − Missing − Rejected + Extra (the
// responses the warehouse holds in the stream that lists them).
//
// MISSING: listed in the stream, not current in the warehouse at a matching
// status (absent, or held at another status: a late completion is missing in
// completed and extra in partial). EXTRA: current in the warehouse at a
// status of the stream, listed by none of the stream's lists (deleted at the
// service, or a phantom). With Options.Deep every current response that is
// neither is read again (one detail call each) and its current rows compared
// with the detail (CONTENT); Options.Sample does the same for that many
// random current responses. Options.Rejected, when set, keeps responses
// rejected at the status listed out of MISSING (they are counted in Rejected:
// reading them again would reject them again).
//
// # Use
//
//	e := verify.New(client, privacyFetcher, wh.Verifier(), verify.Options{Until: until, Deep: deep})
//	res, err := e.Survey(ctx, surveyID) // a *Result: per stream the figures and ids
//	if !res.Clean() { refs := res.Rereads() /* submit them, then verify again */ }
//
// An Engine is for one pass (its VerifyReader may be a snapshot); Survey may
// be called for several surveys in turn, not concurrently.
package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Streams are the four streams, in the order they are reported.
var Streams = []string{survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial}

// Lister lists a survey's responses (surveyapi.Client).
type Lister interface {
	ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error)
}

// Fetcher reads one response's detail (surveyapi.Client, wrapped by the
// privacy policy so that it reads what the pipeline wrote). A removed
// response's error matches survey.ErrNotFound.
type Fetcher interface {
	GetResponse(ctx context.Context, surveyID int64, id survey.GUID) (*survey.Response, error)
}

// Options tune an Engine. The zero value verifies every stream up to now.
type Options struct {
	// Streams are the streams compared (default Streams).
	Streams []string
	// Until bounds the pass: responses completed (started, for partial)
	// at or after it are left out on both sides. Zero: now. Truncated to
	// the second.
	Until time.Time
	// Deep reads every current response's detail again and compares it
	// with its current rows (one detail call each).
	Deep bool
	// Sample compares that many random current responses per survey with
	// their detail (ignored with Deep).
	Sample int
	// Rejected, when set, returns the survey's responses rejected and not
	// written since, with the status of the list that showed them
	// (warehouse.RejectInventory).
	Rejected func(ctx context.Context, surveyID int64) (map[survey.GUID]string, error)
	// PerPage is the list's page size (default and at most 1000).
	PerPage int
	// Concurrency is the number of detail calls at once (default 4).
	Concurrency int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Engine verifies surveys; see the package comment.
type Engine struct {
	l  Lister
	f  Fetcher
	wh warehouse.VerifyReader
	o  Options
}

// New returns an Engine comparing l's lists (and f's details) with wh.
func New(l Lister, f Fetcher, wh warehouse.VerifyReader, o Options) *Engine {
	if len(o.Streams) == 0 {
		o.Streams = Streams
	}
	if o.PerPage <= 0 || o.PerPage > 1000 {
		o.PerPage = 1000
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Engine{l: l, f: f, wh: wh, o: o}
}

// Result is one survey's pass.
type Result struct {
	SurveyID int64
	Until    time.Time // the pass's bound (exclusive)
	Streams  []Stream  // in Options.Streams' order
	// ListCalls and DetailCalls are the API calls the pass made.
	ListCalls, DetailCalls int64
	// Compared is the number of responses whose content was compared
	// (Deep or Sample).
	Compared int
	Duration time.Duration
}

// Stream is one stream's figures and the ids that differ.
type Stream struct {
	Stream    string
	Service   int64 // the list's total
	Warehouse int64 // current in the warehouse, in the stream that lists them
	Missing   []survey.GUID
	Extra     []survey.GUID
	Content   []survey.GUID // current rows differ from the detail (Deep, Sample)
	Rejected  []survey.GUID // listed, not current, rejected at that status (not in Missing)
}

// Clean reports whether the stream has no difference.
func (s *Stream) Clean() bool { return len(s.Missing)+len(s.Extra)+len(s.Content) == 0 }

// Clean reports whether no stream of the survey differs.
func (r *Result) Clean() bool {
	for i := range r.Streams {
		if !r.Streams[i].Clean() {
			return false
		}
	}
	return true
}

// Reread is a response a repair reads again, with the status of the list
// that showed it ("" for an extra one: no list does).
type Reread struct {
	ID           survey.GUID `json:"id"`
	ListedStatus string      `json:"listed_status"`
}

// Rereads are the responses that differ, each once: what a repair reads
// again (the pipeline writes a missing or changed one, and a deletion for
// one the service no longer has).
func (r *Result) Rereads() []Reread {
	seen := map[survey.GUID]bool{}
	var out []Reread
	add := func(ids []survey.GUID, status string) {
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				out = append(out, Reread{ID: id, ListedStatus: status})
			}
		}
	}
	for i := range r.Streams {
		s := &r.Streams[i]
		add(s.Missing, s.Stream)
		add(s.Content, s.Stream)
	}
	for i := range r.Streams {
		add(r.Streams[i].Extra, "")
	}
	return out
}

// group is streams compared together: their lists' totals against the
// warehouse's responses of statuses, dated by start or by completion.
type group struct {
	streams  []string
	statuses []string
	started  bool
}

func groups(streams []string) []group {
	var out []group
	dq := slices.Contains(streams, survey.StatusDisqualified) && slices.Contains(streams, survey.StatusQuotaFull)
	for _, s := range streams {
		switch {
		case dq && s == survey.StatusQuotaFull:
			continue // with disqualified
		case dq && s == survey.StatusDisqualified:
			out = append(out, group{streams: []string{survey.StatusDisqualified, survey.StatusQuotaFull},
				statuses: []string{survey.StatusDisqualified, survey.StatusQuotaFull}})
		default:
			out = append(out, group{streams: []string{s}, statuses: []string{s}, started: s == survey.StatusPartial})
		}
	}
	return out
}

// matches reports whether a response current at status counts in stream
// when stream's list shows it.
func matches(stream, status string) bool {
	if stream == survey.StatusQuotaFull {
		return status == survey.StatusQuotaFull || status == survey.StatusDisqualified
	}
	return stream == status
}

// pass is one survey's pass in progress.
type pass struct {
	e        *Engine
	survey   int64
	until    time.Time
	calls    atomic.Int64
	details  atomic.Int64
	rejected map[survey.GUID]string
	streams  map[string]*Stream
	// listedQF: ids the quotafull list showed at a leaf (a disqualified
	// row among them counts in quotafull).
	listedQF map[survey.GUID]bool
	extra    map[survey.GUID]bool
}

// Survey verifies one survey. An error means it could not be verified (a
// list or the warehouse failed); the result is then incomplete.
func (e *Engine) Survey(ctx context.Context, surveyID int64) (*Result, error) {
	start := e.o.Now()
	until := e.o.Until
	if until.IsZero() {
		until = start
	}
	until = until.UTC().Truncate(time.Second)
	p := &pass{e: e, survey: surveyID, until: until, streams: map[string]*Stream{},
		listedQF: map[survey.GUID]bool{}, extra: map[survey.GUID]bool{}}
	res := &Result{SurveyID: surveyID, Until: until}
	defer func() {
		res.ListCalls, res.DetailCalls = p.calls.Load(), p.details.Load()
		res.Duration = e.o.Now().Sub(start)
	}()
	for _, s := range e.o.Streams {
		p.streams[s] = &Stream{Stream: s}
	}
	if e.o.Rejected != nil {
		rej, err := e.o.Rejected(ctx, surveyID)
		if err != nil {
			return res, fmt.Errorf("verify survey %d: read rejected responses: %w", surveyID, err)
		}
		p.rejected = rej
	}
	for _, g := range groups(e.o.Streams) {
		if err := p.group(ctx, g); err != nil {
			return res, err
		}
	}
	if e.o.Deep || e.o.Sample > 0 {
		n, err := p.content(ctx)
		res.Compared = n
		if err != nil {
			return res, err
		}
	}
	for _, s := range e.o.Streams {
		st := p.streams[s]
		sortIDs(st.Missing)
		sortIDs(st.Extra)
		sortIDs(st.Content)
		sortIDs(st.Rejected)
		res.Streams = append(res.Streams, *st)
	}
	return res, nil
}

func sortIDs(ids []survey.GUID) { slices.Sort(ids) }

// answer is what one list call said of a range: its total, and its ids
// when they all fit the page.
type answer struct {
	total int
	ids   []survey.GUID // nil unless complete
}

// list lists page of stream in [from, to).
func (p *pass) list(ctx context.Context, stream string, from, to time.Time, page int) (*survey.ResponseList, error) {
	q := survey.ListQuery{Page: page, PerPage: p.e.o.PerPage, Status: stream}
	end := to.Add(-time.Nanosecond)
	if stream == survey.StatusPartial {
		q.StartStartedAt, q.EndStartedAt = from, end
	} else {
		q.StartCompletedAt, q.EndCompletedAt = from, end
	}
	p.calls.Add(1)
	l, err := p.e.l.ListResponses(ctx, p.survey, q)
	if err != nil {
		return nil, fmt.Errorf("verify survey %d: list %s from %s to %s: %w", p.survey, stream, fmtTime(from), fmtTime(to), err)
	}
	if l.Total < 0 {
		return nil, fmt.Errorf("verify survey %d: list %s: a negative total (%d)", p.survey, stream, l.Total)
	}
	return l, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "the start"
	}
	return survey.FormatTime(t)
}

// count lists one page of stream in [from, to): its total, and the ids
// when the page holds them all.
func (p *pass) count(ctx context.Context, stream string, from, to time.Time) (answer, error) {
	l, err := p.list(ctx, stream, from, to, 1)
	if err != nil {
		return answer{}, err
	}
	a := answer{total: l.Total}
	if l.Total <= p.e.o.PerPage && len(l.Data) >= l.Total {
		a.ids = make([]survey.GUID, 0, len(l.Data))
		for _, it := range l.Data {
			a.ids = append(a.ids, it.ResponseID)
		}
	}
	return a, nil
}

// maxDepth bounds the bisection (a second's resolution over 2^40 s).
const maxDepth = 48

func (p *pass) group(ctx context.Context, g group) error {
	ans := make([]answer, len(g.streams))
	for i, s := range g.streams {
		a, err := p.count(ctx, s, time.Time{}, p.until)
		if err != nil {
			return err
		}
		ans[i] = a
		p.streams[s].Service = int64(a.total)
	}
	wh, err := p.whCount(ctx, g, time.Time{}, p.until)
	if err != nil {
		return err
	}
	if err := p.compare(ctx, g, time.Time{}, p.until, ans, wh, 0, false); err != nil {
		return err
	}
	if len(g.streams) == 1 {
		p.streams[g.streams[0]].Warehouse = wh.N
		return nil
	}
	// disqualified + quotafull: each counts the responses the warehouse
	// holds in the stream that lists them.
	qf := p.streams[survey.StatusQuotaFull]
	qf.Warehouse = qf.Service - int64(len(qf.Missing)+len(qf.Rejected)) + int64(len(qf.Extra))
	p.streams[survey.StatusDisqualified].Warehouse = wh.N - qf.Warehouse
	return nil
}

func (p *pass) whCount(ctx context.Context, g group, from, to time.Time) (warehouse.RangeCount, error) {
	c, err := p.e.wh.Count(ctx, warehouse.Range{SurveyID: p.survey, Statuses: g.statuses, Started: g.started, From: from, To: to})
	if err != nil {
		return c, fmt.Errorf("verify survey %d: count the warehouse's %v responses: %w", p.survey, g.statuses, err)
	}
	return c, nil
}

// compare compares [from, to), whose lists answered ans and whose warehouse
// count is wh.
//
// scattered says the parent's halves both differed: the differences are
// spread rather than in one cluster.
func (p *pass) compare(ctx context.Context, g group, from, to time.Time, ans []answer, wh warehouse.RangeCount, depth int, scattered bool) error {
	sum := 0
	complete := true
	for _, a := range ans {
		sum += a.total
		complete = complete && a.ids != nil
	}
	if int64(sum) == wh.N {
		return nil
	}
	if complete || p.pagingCheaper(sum, wh.N, len(ans), scattered) {
		return p.leaf(ctx, g, from, to, ans)
	}
	mid := wh.Mid
	lo := from
	if lo.IsZero() {
		lo = time.Unix(0, 0).UTC()
	}
	if wh.N < 2 || !mid.After(lo) || !mid.Before(to) {
		mid = lo.Add(to.Sub(lo) / 2).Truncate(time.Second)
	}
	if depth >= maxDepth || !mid.After(lo) || !mid.Before(to) {
		return p.leaf(ctx, g, from, to, ans) // cannot split: page it
	}
	left := make([]answer, len(g.streams))
	right := make([]answer, len(g.streams))
	for i, s := range g.streams {
		a, err := p.count(ctx, s, from, mid)
		if err != nil {
			return err
		}
		left[i] = a
		// The other half's total is the parent's less this one; its ids
		// are listed if it turns out to differ.
		right[i] = answer{total: max(ans[i].total-a.total, 0)}
		if right[i].total == 0 {
			right[i].ids = []survey.GUID{}
		}
	}
	whL, err := p.whCount(ctx, g, from, mid)
	if err != nil {
		return err
	}
	whR, err := p.whCount(ctx, g, mid, to)
	if err != nil {
		return err
	}
	sumL, sumR := 0, 0
	for i := range left {
		sumL += left[i].total
		sumR += right[i].total
	}
	spread := int64(sumL) != whL.N && int64(sumR) != whR.N
	if err := p.compare(ctx, g, from, mid, left, whL, depth+1, spread); err != nil {
		return err
	}
	return p.compareRight(ctx, g, mid, to, right, whR, depth+1, spread)
}

// pagingCheaper reports whether listing every page of a range (total
// responses listed over lists) costs fewer calls than bisecting it, for
// d = |total − warehouse| differences at least. When they are scattered
// (the parent's halves both differed), they share the top log₂ d levels of the
// bisection and then cost about one call a level each, plus about two each
// at the bottom: many scattered differences over a few pages are cheaper
// paged (never much more than a full listing of the range). A cluster is
// bisected: O(log n) calls.
func (p *pass) pagingCheaper(total int, wh int64, lists int, scattered bool) bool {
	per := float64(p.e.o.PerPage)
	pages := float64(lists) + float64(total)/per
	d := math.Abs(float64(int64(total) - wh))
	levels := max(math.Log2(float64(total)/per)-math.Log2(d), 0)
	return scattered && pages <= 2*d+d*levels
}

// compareRight is compare for a half whose totals were derived: if they
// differ from the warehouse, its lists are asked (their totals may be
// smaller than derived) before going on.
func (p *pass) compareRight(ctx context.Context, g group, from, to time.Time, ans []answer, wh warehouse.RangeCount, depth int, scattered bool) error {
	sum := 0
	for _, a := range ans {
		sum += a.total
	}
	if int64(sum) == wh.N {
		return nil
	}
	for i, s := range g.streams {
		if ans[i].ids != nil && ans[i].total == 0 {
			continue
		}
		a, err := p.count(ctx, s, from, to)
		if err != nil {
			return err
		}
		ans[i] = a
	}
	return p.compare(ctx, g, from, to, ans, wh, depth, scattered)
}

// leaf compares the ids of [from, to): every page of each list (none more
// when the page in hand holds them all) against the warehouse's ids.
func (p *pass) leaf(ctx context.Context, g group, from, to time.Time, ans []answer) error {
	type listed struct {
		id     survey.GUID
		stream string
	}
	var all []listed
	for i, s := range g.streams {
		ids := ans[i].ids
		if ids == nil {
			var err error
			if ids, err = p.page(ctx, s, from, to); err != nil {
				return err
			}
		}
		for _, id := range ids {
			all = append(all, listed{id, s})
		}
	}
	have, err := p.e.wh.IDs(ctx, warehouse.Range{SurveyID: p.survey, Statuses: g.statuses, Started: g.started, From: from, To: to})
	if err != nil {
		return fmt.Errorf("verify survey %d: read the warehouse's %v responses: %w", p.survey, g.statuses, err)
	}
	// quotafull first: a disqualified row it lists is its.
	slices.SortStableFunc(all, func(a, b listed) int {
		qa, qb := a.stream == survey.StatusQuotaFull, b.stream == survey.StatusQuotaFull
		switch {
		case qa && !qb:
			return -1
		case qb && !qa:
			return 1
		}
		return 0
	})
	matched := map[survey.GUID]bool{}
	for _, l := range all {
		st := p.streams[l.stream]
		if l.stream == survey.StatusQuotaFull {
			p.listedQF[l.id] = true
		}
		if status, ok := have[l.id]; ok && !matched[l.id] && matches(l.stream, status) {
			matched[l.id] = true
			continue
		}
		if rs, ok := p.rejected[l.id]; ok && rs == l.stream {
			st.Rejected = append(st.Rejected, l.id)
			continue
		}
		st.Missing = append(st.Missing, l.id)
	}
	for id, status := range have {
		if matched[id] {
			continue
		}
		s := status
		if !slices.Contains(g.streams, s) {
			s = g.streams[0]
		}
		p.streams[s].Extra = append(p.streams[s].Extra, id)
		p.extra[id] = true
	}
	return nil
}

// page lists every id of stream in [from, to).
func (p *pass) page(ctx context.Context, stream string, from, to time.Time) ([]survey.GUID, error) {
	var out []survey.GUID
	seen := map[survey.GUID]bool{}
	limit := 0
	for page := 1; ; page++ {
		l, err := p.list(ctx, stream, from, to, page)
		if err != nil {
			return nil, err
		}
		if page == 1 {
			limit = l.Total/p.e.o.PerPage + 10
		}
		added := 0
		for _, it := range l.Data {
			if !seen[it.ResponseID] {
				seen[it.ResponseID] = true
				out = append(out, it.ResponseID)
				added++
			}
		}
		if len(l.Data) < p.e.o.PerPage || page*p.e.o.PerPage >= l.Total || added == 0 {
			return out, nil
		}
		if page >= limit {
			return nil, fmt.Errorf("verify survey %d: list %s: still more pages after %d (total %d); not believed", p.survey, stream, page, l.Total)
		}
	}
}

// content compares current responses with their detail: every one (Deep)
// or a random sample, less the extra ones. It returns how many it compared.
func (p *pass) content(ctx context.Context) (int, error) {
	var ids []survey.GUID
	status := map[survey.GUID]string{}
	var statuses []string
	for _, g := range groups(p.e.o.Streams) {
		statuses = append(statuses, g.statuses...)
	}
	if p.e.o.Deep {
		for _, g := range groups(p.e.o.Streams) {
			have, err := p.e.wh.IDs(ctx, warehouse.Range{SurveyID: p.survey, Statuses: g.statuses, Started: g.started, To: p.until})
			if err != nil {
				return 0, fmt.Errorf("verify survey %d: read the warehouse's responses: %w", p.survey, err)
			}
			for id, st := range have {
				if !p.extra[id] {
					ids = append(ids, id)
					status[id] = st
				}
			}
		}
	} else {
		sample, err := p.e.wh.Sample(ctx, p.survey, p.e.o.Sample)
		if err != nil {
			return 0, fmt.Errorf("verify survey %d: sample the warehouse's responses: %w", p.survey, err)
		}
		for _, id := range sample {
			if !p.extra[id] {
				ids = append(ids, id)
			}
		}
	}
	sortIDs(ids)
	var mu sync.Mutex
	compared := 0
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		chunk := ids[:n]
		ids = ids[n:]
		stored, err := p.e.wh.Content(ctx, p.survey, chunk)
		if err != nil {
			return compared, fmt.Errorf("verify survey %d: read current rows: %w", p.survey, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(p.e.o.Concurrency)
		for _, id := range chunk {
			c, ok := stored[id]
			if !ok {
				continue // no longer current (written since)
			}
			if !slices.Contains(statuses, c.Status) {
				continue // a stream not verified
			}
			g.Go(func() error {
				p.details.Add(1)
				r, err := p.e.f.GetResponse(gctx, p.survey, id)
				var differs bool
				switch {
				case errors.Is(err, survey.ErrNotFound):
					differs = true // current here, removed there
				case err != nil:
					return fmt.Errorf("verify survey %d: read response %s: %w", p.survey, id, err)
				default:
					differs = !ContentOf(r).Equal(c)
				}
				mu.Lock()
				defer mu.Unlock()
				compared++
				if differs {
					s := p.streamOf(id, c.Status)
					if st := p.streams[s]; st != nil {
						st.Content = append(st.Content, id)
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return compared, err
		}
	}
	return compared, nil
}

// streamOf is the stream a current response counts in.
func (p *pass) streamOf(id survey.GUID, status string) string {
	if status == survey.StatusDisqualified && p.listedQF[id] && p.streams[survey.StatusQuotaFull] != nil {
		return survey.StatusQuotaFull
	}
	return status
}

// ContentOf is what a detail's rows hold, as warehouse.Content: the fields
// the pipeline writes (pipeline/flatten), dates to the second.
func ContentOf(r *survey.Response) warehouse.Content {
	c := warehouse.Content{Status: r.ResponseStatus, Created: warehouse.Second(r.DateCreated.Time)}
	if r.DateCompleted != nil && !r.DateCompleted.IsZero() {
		c.Completed = warehouse.Second(r.DateCompleted.Time)
	}
	for _, pg := range r.Pages {
		for _, q := range pg.Questions {
			for _, a := range q.Answers {
				x := warehouse.Answer{PageID: pg.ID, QuestionID: q.ID,
					RowID: flex(a.RowID), ColumnID: flex(a.ColumnID), ChoiceID: flex(a.ChoiceID), OtherID: flex(a.OtherID), Value: flex(a.Value)}
				switch {
				case a.Text != nil:
					x.Text = *a.Text
				case a.FileID != nil:
					x.Text = string(*a.FileID)
				}
				c.Answers = append(c.Answers, x)
			}
		}
	}
	return c
}

func flex(v *survey.FlexInt) warehouse.OptInt {
	if v == nil {
		return warehouse.OptInt{}
	}
	return warehouse.OptInt{V: int64(*v), Valid: true}
}
