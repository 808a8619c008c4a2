package erase

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// fakeWarehouse keeps rows per response and audit rows in memory.
type fakeWarehouse struct {
	mu       sync.Mutex
	rows     map[warehouse.ResponseKey]int64
	audit    map[warehouse.ResponseKey]warehouse.Erasure
	failRows error // EraseRows fails after removing nothing
	contacts map[int64][]warehouse.ResponseKey
}

func newFake() *fakeWarehouse {
	return &fakeWarehouse{rows: map[warehouse.ResponseKey]int64{}, audit: map[warehouse.ResponseKey]warehouse.Erasure{}, contacts: map[int64][]warehouse.ResponseKey{}}
}

func (f *fakeWarehouse) RecordErasures(_ context.Context, es []warehouse.Erasure) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range es {
		f.audit[e.ResponseKey] = e
	}
	return nil
}

func (f *fakeWarehouse) Erasures(context.Context) ([]warehouse.Erasure, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []warehouse.Erasure
	for _, e := range f.audit {
		out = append(out, e)
	}
	return out, nil
}

func (f *fakeWarehouse) EraseRows(_ context.Context, keys []warehouse.ResponseKey) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRows != nil {
		return nil, f.failRows
	}
	var n int64
	for _, k := range keys {
		n += f.rows[k]
		delete(f.rows, k)
	}
	return map[string]int64{"responses": n}, nil
}

func (f *fakeWarehouse) ResponsesOfContact(_ context.Context, id int64, hash string) ([]warehouse.ResponseKey, error) {
	if hash != "" {
		id = -1
	}
	return f.contacts[id], nil
}

func (f *fakeWarehouse) EraseContact(context.Context, int64, string) (int64, error) { return 1, nil }

type fakeObjects struct{ n map[survey.GUID]int }

func (o *fakeObjects) DeleteResponse(_ context.Context, _ int64, id survey.GUID) (int, error) {
	n := o.n[id]
	delete(o.n, id)
	return n, nil
}

const (
	id1 = "da453b67-791e-4d4d-9009-75b1ed8a33c1"
	id2 = "da453b67-791e-4d4d-9009-75b1ed8a33c2"
)

func key(s int64, id string) warehouse.ResponseKey {
	return warehouse.ResponseKey{SurveyID: s, ResponseID: survey.GUID(id)}
}

// A run that dies after the tombstone (the rows could not be removed) is
// finished by the next Resume; the tombstone holds from the first moment.
func TestEraseCrashThenResume(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	f.rows[key(1, id1)] = 3
	f.rows[key(1, id2)] = 2
	f.failRows = errors.New("server gone")
	objs := &fakeObjects{n: map[survey.GUID]int{id1: 2}}
	s, err := New(Options{Warehouse: f, Objects: objs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Erase(ctx, []warehouse.ResponseKey{key(1, strings.ToUpper(id1))}, warehouse.ReasonRequest); err == nil {
		t.Fatal("Erase succeeded while the rows could not be removed")
	}
	if !s.Erased(1, id1) || !s.Erased(1, survey.GUID(strings.ToUpper(id1))) || s.Erased(1, id2) || s.Erased(2, id1) {
		t.Error("the tombstone does not cover exactly the erased response")
	}
	if e := f.audit[key(1, id1)]; e.State != warehouse.ErasureStarted || e.Reason != warehouse.ReasonRequest {
		t.Errorf("audit row after the failure = %+v, want started", e)
	}
	// A new process (the daemon's next start, or the next erase command).
	f.failRows = nil
	s2, _ := New(Options{Warehouse: f, Objects: objs})
	rep, err := s2.Resume(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Responses != 1 || rep.Rows["responses"] != 3 || rep.Objects != 2 {
		t.Errorf("Resume report = %+v", rep)
	}
	e := f.audit[key(1, id1)]
	if e.State != warehouse.ErasureDone || e.Erased != "responses=3 objects=2" || e.CompletedAt.IsZero() || e.Reason != warehouse.ReasonRequest {
		t.Errorf("audit row = %+v", e)
	}
	if f.rows[key(1, id2)] != 2 {
		t.Error("the other response was erased")
	}
	// Idempotent: erasing again finds nothing and keeps the audit row.
	if _, err := s2.Erase(ctx, []warehouse.ResponseKey{key(1, id1)}, warehouse.ReasonDeletedAtSource); err != nil {
		t.Fatal(err)
	}
	if got := f.audit[key(1, id1)]; got != e {
		t.Errorf("a second erase changed the audit row: %+v", got)
	}
}

// Run erases what Deleted queues, and a sweep removes rows written after
// the erasure (a write that was in flight).
func TestRunDeletedAndSweep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake()
	f.rows[key(1, id1)] = 3
	s, _ := New(Options{Warehouse: f, Refresh: 20 * time.Millisecond, Settle: time.Hour})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	s.Deleted(ctx, 1, id1)
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.audit[key(1, id1)].State == warehouse.ErasureDone
	})
	f.mu.Lock()
	f.rows[key(1, id1)] = 1 // a late write
	f.mu.Unlock()
	// The sweep removes the row, then records it in the audit row: wait
	// for both (read under the fake's lock: the sweep runs meanwhile).
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.rows[key(1, id1)] == 0 && strings.Contains(f.audit[key(1, id1)].Erased, "then responses=1")
	})
	f.mu.Lock()
	e := f.audit[key(1, id1)]
	f.mu.Unlock()
	if e.Reason != warehouse.ReasonDeletedAtSource {
		t.Errorf("audit row = %+v", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestEraseContact(t *testing.T) {
	f := newFake()
	f.rows[key(1, id1)] = 1
	f.rows[key(2, id2)] = 1
	f.contacts[-1] = []warehouse.ResponseKey{key(1, id1), key(2, id2)}
	s, _ := New(Options{Warehouse: f, HashContact: func(int64) string { return "h" }})
	rep, err := s.EraseContact(context.Background(), 42)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Responses != 2 || rep.Contacts != 1 || len(f.rows) != 0 || f.audit[key(2, id2)].Reason != warehouse.ReasonContactRequest {
		t.Errorf("report %+v, rows left %v, audit %v", rep, f.rows, f.audit)
	}
}

func TestWatchLoadsTombstones(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFake()
	s, _ := New(Options{Warehouse: f, Refresh: 10 * time.Millisecond})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Watch(ctx, nil); close(done) }()
	// Another process (an erase command, the leader) erases.
	other, _ := New(Options{Warehouse: f})
	if _, err := other.Erase(ctx, []warehouse.ResponseKey{key(1, id1)}, warehouse.ReasonRequest); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Erased(1, survey.GUID(id1)) })
	cancel()
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// OnErased's f is called when the tombstone set grows, here (Erase) or at
// a reload (another process erased), and not when nothing new is found.
func TestOnErasedWhenTombstonesGrow(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	s, _ := New(Options{Warehouse: f})
	var calls atomic.Int32
	s.OnErased(func() { calls.Add(1) })
	if err := s.Load(ctx); err != nil || calls.Load() != 0 {
		t.Fatalf("empty load: %v, %d calls", err, calls.Load())
	}
	if _, err := s.Erase(ctx, []warehouse.ResponseKey{key(1, id1)}, warehouse.ReasonRequest); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("after an erasure: %d calls, want 1", calls.Load())
	}
	if _, err := s.Erase(ctx, []warehouse.ResponseKey{key(1, id1)}, warehouse.ReasonRequest); err != nil || calls.Load() != 1 {
		t.Fatalf("erased again: %v, %d calls, want 1", err, calls.Load())
	}
	other, _ := New(Options{Warehouse: f})
	if _, err := other.Erase(ctx, []warehouse.ResponseKey{key(1, id2)}, warehouse.ReasonRequest); err != nil {
		t.Fatal(err)
	}
	if err := s.Load(ctx); err != nil || calls.Load() != 2 {
		t.Fatalf("a reload finding another's erasure: %v, %d calls, want 2", err, calls.Load())
	}
	if err := s.Load(ctx); err != nil || calls.Load() != 2 {
		t.Fatalf("a reload finding nothing new: %v, %d calls, want 2", err, calls.Load())
	}
}
