package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/sink/warehousetest"
)

// TestWarehouseSuite runs the warehouse contract's conformance suite on
// ClickHouse, each store a database of its own dropped at the end: every
// part is there. It runs on the single server twice, in the single-node
// layout and in the cluster layout (Distributed tables over _local ones)
// on the one-shard cluster surveysync_local. On the test cluster (make
// test-cluster) the server, 18.16 replicated, refuses the mutations of
// erasure and privacy apply by design, and the suite holds it to that
// refusal.
func TestWarehouseSuite(t *testing.T) {
	if testAddr() == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	if onCluster() {
		exerciseClickHouse(t, nil)
		return
	}
	t.Run("single", func(t *testing.T) { exerciseClickHouse(t, nil) })
	t.Run("one-shard cluster", func(t *testing.T) {
		exerciseClickHouse(t, func(o *Options) { o.Cluster = "surveysync_local"; o.noOnClusterDDL = true })
	})
}

// exerciseClickHouse runs the suite on stores opened with mod's options.
func exerciseClickHouse(t *testing.T, mod func(*Options)) {
	suiteOptions := func(db string) Options {
		o := testOptions(db)
		o.Wide.ChoiceIDs = true
		if mod != nil {
			mod(&o)
		}
		return o
	}
	b := warehousetest.Backend{
		NewStore: func(t *testing.T) func(t *testing.T) warehouse.Warehouse {
			db := randomDB()
			var first *Sink
			t.Cleanup(func() {
				if first == nil {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				s, err := Open(ctx, suiteOptions(db))
				if err != nil {
					t.Errorf("open %s to drop it: %v", db, err)
					return
				}
				defer s.Close()
				if err := dropDatabase(ctx, s); err != nil {
					t.Errorf("drop database %s: %v", db, err)
				}
			})
			return func(t *testing.T) warehouse.Warehouse {
				s, err := Open(ctxT(t), suiteOptions(db))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if first == nil {
					first = s
				}
				return s
			}
		},
		Parts: warehousetest.Parts{Inventory: true, RejectInventory: true, WebhookLog: true, Eraser: true, QueryConn: true, Leases: true},
	}
	if onCluster() {
		b.MutationsRefused = "refused on cluster"
	}
	warehousetest.Exercise(t, b)
}
