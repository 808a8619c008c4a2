package parquet

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/surveysync/surveysync/record"
)

func TestWarehouseParts(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWarehouse(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if w.WebhookLog() != nil || w.QueryConn() != nil {
		t.Error("the Parquet warehouse has no webhook log or query connection")
	}
	if w.Inventory() == nil || w.Eraser() == nil {
		t.Error("the Parquet warehouse has an inventory and erases (issue 23)")
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
