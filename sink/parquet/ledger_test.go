package parquet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/record"
)

func TestFileLedgerTornTail(t *testing.T) {
	dir := t.TempDir()
	l, err := NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := record.ContactEntry{Feed: "f", Key: "k1", DistributionID: 1, State: "pushed", ContactID: 5}
	if err := l.RecordContacts(ctx, []record.ContactEntry{e}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// A crash mid-write leaves half a line.
	fh, _ := os.OpenFile(filepath.Join(dir, "f.contacts.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	fh.WriteString(`{"feed":"f","key":"k2","sta`)
	fh.Close()
	l, _ = NewFileLedger(dir)
	defer l.Close()
	e.Key = "k3"
	if err := l.RecordContacts(ctx, []record.ContactEntry{e}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := l.LoadContacts(ctx, "f", func(e record.ContactEntry) error { keys = append(keys, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "k1,k3" {
		t.Fatalf("keys after torn tail: %v", keys)
	}
}
