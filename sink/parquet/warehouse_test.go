package parquet

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/surveysync/surveysync/record"
)

// The parts' files are made on first use, and Ping fails once the
// warehouse is closed. Which parts there are is the warehouse suite's.
func TestWarehouseParts(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWarehouse(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "uploaded_files.db")); !os.IsNotExist(err) {
		t.Errorf("the file index exists before its first use: %v", err)
	}
	if _, err := w.FileIndex(); err != nil {
		t.Fatal(err)
	}
	l, err := w.FeedLedger()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.RecordContacts(ctx, []record.ContactEntry{{Feed: "f", Key: "k", State: "pushed"}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"uploaded_files.db", "_feeds/ledger.db"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Error(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Ping(ctx); err == nil {
		t.Error("Ping after Close succeeded")
	}
}
