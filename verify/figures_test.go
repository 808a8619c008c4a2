package verify

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

// memReader is a warehouse.VerifyReader over a slice: the figures below
// count API calls, which do not depend on the backend (both backends
// answer the same reads: TestFindsEachDifference runs on each), and a
// million responses written into a real warehouse would take the test
// machine minutes for nothing measured.
type memReader struct{ rs []memResp }

type memResp struct {
	id                 survey.GUID
	status             string
	created, completed time.Time
}

func (m *memReader) in(r warehouse.Range) []time.Time {
	var out []time.Time
	for _, x := range m.rs {
		if !slices.Contains(r.Statuses, x.status) {
			continue
		}
		d := x.completed
		if r.Started || d.IsZero() {
			d = x.created
		}
		d = warehouse.Second(d)
		if !r.From.IsZero() && d.Before(r.From) || !r.To.IsZero() && !d.Before(r.To) {
			continue
		}
		out = append(out, d)
	}
	return out
}

func (m *memReader) Count(_ context.Context, r warehouse.Range) (warehouse.RangeCount, error) {
	ds := m.in(r)
	c := warehouse.RangeCount{N: int64(len(ds))}
	if len(ds) > 0 {
		slices.SortFunc(ds, func(a, b time.Time) int { return a.Compare(b) })
		c.Mid = ds[len(ds)/2]
	}
	return c, nil
}

func (m *memReader) IDs(_ context.Context, r warehouse.Range) (map[survey.GUID]string, error) {
	out := map[survey.GUID]string{}
	for _, x := range m.rs {
		if (&memReader{rs: []memResp{x}}).in(r) != nil {
			out[x.id] = x.status
		}
	}
	return out, nil
}

func (m *memReader) Sample(context.Context, int64, int) ([]survey.GUID, error) { return nil, nil }
func (m *memReader) Content(context.Context, int64, []survey.GUID) (map[survey.GUID]warehouse.Content, error) {
	return nil, nil
}

// TestAPICallFigures measures the list calls of a pass over the emulator
// for surveys of 1,000, 100,000 and 1,000,000 responses: clean, and with d
// differences in one cluster or scattered, next to a full reconcile's
// Σ⌈listed ÷ 1000⌉. On demand: SURVEYSYNC_VERIFY_FIGURES=1 (minutes).
func TestAPICallFigures(t *testing.T) {
	if os.Getenv("SURVEYSYNC_VERIFY_FIGURES") == "" {
		t.Skip("on demand: SURVEYSYNC_VERIFY_FIGURES=1")
	}
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		s, err := sim.New(sim.Options{Token: "t", Now: func() time.Time { return testNow }, Seed: 3, Surveys: []sim.SurveySpec{{
			ID: testSurvey, Responses: n, Seed: 11, Start: testNow.Add(-time.Hour - time.Duration(n)*time.Minute), LateCompletion: -1,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		c, err := surveyapi.New(surveyapi.Options{BaseURL: srv.URL + "/v1", Token: "t", UserAgent: "test (t@example.invalid)", MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		var truth []memResp
		listed := map[string]int{}
		for r := range s.Responses(testSurvey) {
			x := memResp{id: r.ResponseID, status: r.ResponseStatus, created: r.DateCreated.Time}
			if r.DateCompleted != nil {
				x.completed = r.DateCompleted.Time
			}
			truth = append(truth, x)
			listed[r.ResponseStatus]++
		}
		full := 0
		for _, k := range listed {
			full += (k + 999) / 1000
		}
		// completed ones ordered by completion: a cluster is a run of them.
		var done []int
		for i, x := range truth {
			if x.status == survey.StatusCompleted {
				done = append(done, i)
			}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		pass := func(name string, drop []int) {
			wh := &memReader{}
			skip := map[int]bool{}
			for _, i := range drop {
				skip[i] = true
			}
			for i, x := range truth {
				if !skip[i] {
					wh.rs = append(wh.rs, x)
				}
			}
			res, err := New(c, c, wh, Options{Until: testNow}).Survey(context.Background(), testSurvey)
			if err != nil {
				t.Fatal(err)
			}
			found := 0
			for _, st := range res.Streams {
				found += len(st.Missing) + len(st.Extra)
			}
			if found != len(drop) {
				t.Fatalf("n=%d %s: found %d differences, want %d", n, name, found, len(drop))
			}
			t.Logf("n=%9d  %-26s  list calls %4d  (full reconcile: %d)", n, name, res.ListCalls, full)
		}
		pass("clean", nil)
		for _, d := range []int{1, 10, 100} {
			if d > len(done) {
				continue
			}
			at := rng.IntN(len(done) - d)
			pass("d="+itoa(d)+" in one cluster", done[at:at+d])
			var spread []int
			for _, k := range rng.Perm(len(done))[:d] {
				spread = append(spread, done[k])
			}
			pass("d="+itoa(d)+" scattered", spread)
		}
		c.Close()
		srv.Close()
		s.Close()
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestDeepFigures times a --deep pass (one detail call per response, its
// rows read back) over 10,000 responses on each backend. On demand:
// SURVEYSYNC_VERIFY_FIGURES=1.
func TestDeepFigures(t *testing.T) {
	if os.Getenv("SURVEYSYNC_VERIFY_FIGURES") == "" {
		t.Skip("on demand: SURVEYSYNC_VERIFY_FIGURES=1")
	}
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			f := newFixture(t, b, 10_000)
			start := time.Now()
			res := f.verify(t, Options{Deep: true})
			took := time.Since(start)
			if !res.Clean() || res.Compared < 9_000 {
				t.Fatalf("deep over a copy: clean %v, %d compared", res.Clean(), res.Compared)
			}
			t.Logf("%s: --deep over %d responses: %s, %d list calls, %d detail calls", b, res.Compared, took.Round(10*time.Millisecond), res.ListCalls, res.DetailCalls)
		})
	}
}

// TestPassTimeFigures times passes over 100,000 responses written in each
// backend: clean, and with 10 responses lost in one cluster. On demand:
// SURVEYSYNC_VERIFY_FIGURES=1.
func TestPassTimeFigures(t *testing.T) {
	if os.Getenv("SURVEYSYNC_VERIFY_FIGURES") == "" {
		t.Skip("on demand: SURVEYSYNC_VERIFY_FIGURES=1")
	}
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			f := newFixture(t, b, 100_000)
			time1 := func(name string) {
				start := time.Now()
				res := f.verify(t, Options{})
				t.Logf("%s, 100,000 responses, %s: %s, %d list calls", b, name, time.Since(start).Round(10*time.Millisecond), res.ListCalls)
			}
			time1("clean")
			var del []flatten.Item
			for _, r := range f.ids(survey.StatusCompleted, 5000)[4990:] {
				f.ver++
				del = append(del, flatten.Item{SurveyID: testSurvey, ResponseID: r.ResponseID, Deleted: true, Version: f.ver, SyncedAt: testNow})
			}
			f.write(t, del...)
			time1("10 lost in one cluster")
		})
	}
}
