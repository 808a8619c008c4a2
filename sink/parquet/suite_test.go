package parquet

import (
	"testing"

	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/sink/warehousetest"
)

// TestWarehouseSuite runs the warehouse contract's conformance suite on
// the Parquet warehouse: an inventory that also lists rejected responses,
// an eraser; no webhook log, no query connection, no leases (the daemon
// locks the folder instead).
func TestWarehouseSuite(t *testing.T) {
	warehousetest.Exercise(t, warehousetest.Backend{
		NewStore: func(t *testing.T) func(t *testing.T) warehouse.Warehouse {
			dir := t.TempDir()
			return func(t *testing.T) warehouse.Warehouse {
				wh, err := OpenWarehouse(Options{Dir: dir, WideChoiceIDs: true})
				if err != nil {
					t.Fatal(err)
				}
				return wh
			}
		},
		Parts: warehousetest.Parts{Inventory: true, RejectInventory: true, Eraser: true},
	})
}
