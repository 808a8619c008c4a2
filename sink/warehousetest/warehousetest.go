// Package warehousetest is the conformance suite of the warehouse contract
// (package sink/warehouse): one set of tests that every backend passes, in
// the manner of River's riverdrivertest.Exercise. sink/parquet runs it
// always, sink/clickhouse when a test server is configured (and once more
// on the test cluster, make test-cluster). Production code never imports
// it: only the backends' _test.go files do.
//
// The tests share one store per Exercise (a Parquet folder, a ClickHouse
// database), each in surveys, feeds and ids of its own, so that a
// backend's run takes seconds; the privacy test, which rewrites the whole
// warehouse, has a store of its own. A new warehouse capability is one
// method, one implementation per backend and one test here.
package warehousetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
)

// Backend describes the warehouse under test.
type Backend struct {
	// NewStore makes fresh, empty storage (a folder, a database) that is
	// removed when t ends, and returns how to open a Warehouse on it, with
	// wide.choice_ids on. open may be called again once the warehouse it
	// returned is closed: a restart.
	NewStore func(t *testing.T) (open func(t *testing.T) warehouse.Warehouse)

	// Parts says which optional parts the backend has: the documented
	// choice the suite holds it to (a nil part where one is expected, or
	// the reverse, fails).
	Parts Parts

	// MutationsRefused, when not "", is the backend's documented refusal
	// to rewrite written rows (ClickHouse 18.x on a replicated cluster):
	// EraseRows and ApplyPrivacy must fail with an error containing it,
	// and leave the rows as they were.
	MutationsRefused string
}

// Parts are the optional parts of a warehouse.Warehouse: true where the
// backend returns one, false where it returns nil.
type Parts struct {
	Inventory       bool
	RejectInventory bool // the Inventory is also a warehouse.RejectInventory
	WebhookLog      bool
	Eraser          bool
	QueryConn       bool
	Leases          bool
}

// Exercise runs the suite against b.
func Exercise(t *testing.T, b Backend) {
	t.Helper()
	open := b.NewStore(t)
	wh := open(t)
	s := &suite{b: b, open: open, wh: wh}
	t.Cleanup(func() {
		if err := s.wh.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		// Fresh runs first: it finds the shared store empty.
		{"Fresh", testFresh},
		{"Parts", testParts},
		{"WriteTwice", testWriteTwice},
		{"Versions", testVersions},
		{"ExportWide", testExportWide},
		{"States", testStates},
		{"Surveys", testSurveys},
		{"Rejects", testRejects},
		{"FileIndex", testFileIndex},
		{"FeedLedger", testFeedLedger},
		{"Erase", testErase},
		{"Lease", testLease},
		{"Verify", testVerify},
		{"VerifyLog", testVerifyLog},
		// Restart closes the shared warehouse and opens it again.
		{"Restart", testRestart},
		{"Privacy", testPrivacy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

// suite is the state the tests share.
type suite struct {
	b    Backend
	open func(t *testing.T) warehouse.Warehouse
	wh   warehouse.Warehouse // the shared store's, replaced by Restart
}

// ctx is a context for one test, cancelled when it ends.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// guid is the n-th response id of a survey: lower case, distinct per
// survey, so that the tests' rows never meet.
func guid(surveyID int64, n int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", surveyID, n)
}

// Each test's surveys, and feeds (by name).
const (
	surveyWrite    = 910001
	surveyVersions = 910002
	surveyWide     = 4574 // the emulator's survey with every question kind
	surveyStates   = 910004
	surveyRejects  = 910005
	surveyRejects2 = 910006
	surveyFiles    = 910007
	surveyErase    = 910008
	surveyErase2   = 910009
	surveyRestart  = 910010
	surveyPrivacy  = 910011
	surveyVerify   = 910013
	surveyVerify2  = 910014
)
