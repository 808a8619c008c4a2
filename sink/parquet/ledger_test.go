package parquet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/record"
)

func ledgerKeys(t *testing.T, l *FileLedger, feed string) string {
	t.Helper()
	var keys []string
	if err := l.LoadContacts(context.Background(), feed, func(e record.ContactEntry) error { keys = append(keys, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	return strings.Join(keys, ",")
}

// Entries come back per feed in recording order, after a reopen too, in
// more than one read chunk.
func TestFileLedgerOrderAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	l, err := NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	for c := range 3 {
		var batch []record.ContactEntry
		for i := range loadChunk {
			k := fmt.Sprintf("k%d", c*loadChunk+i)
			batch = append(batch, record.ContactEntry{Feed: "f", Key: k, State: "pushed"}, record.ContactEntry{Feed: "g", Key: k})
			want = append(want, k)
		}
		if err := l.RecordContacts(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.RecordSend(ctx, record.SendEntry{Feed: "f", BatchID: "b1"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = NewFileLedger(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := ledgerKeys(t, l, "f"); got != strings.Join(want, ",") {
		t.Errorf("feed f: %d keys, not in order", strings.Count(got, ",")+1)
	}
	if got := ledgerKeys(t, l, "nobody"); got != "" {
		t.Errorf("unknown feed: %q", got)
	}
	var sends []string
	if err := l.LoadSends(ctx, "f", func(e record.SendEntry) error { sends = append(sends, e.BatchID); return nil }); err != nil || len(sends) != 1 {
		t.Errorf("sends %v %v", sends, err)
	}
}

// A ledger of the former format (<feed>.contacts.jsonl, .sends.jsonl, the
// last line torn by a crash) is imported at the first open and its files
// removed; new entries follow the imported ones.
func TestFileLedgerImportsFormerJSONL(t *testing.T) {
	dir := t.TempDir()
	contacts := `{"feed":"f","key":"k1","distribution_id":1,"state":"pushed","contact_id":5}` + "\n" +
		`{"feed":"f","key":"k2","distribution_id":1,"state":"uncertain"}` + "\n" + `{"feed":"f","key":"k9","sta`
	files := map[string]string{"f.contacts.jsonl": contacts, "f.sends.jsonl": `{"feed":"f","batch_id":"b1"}` + "\n"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.RecordContacts(ctx, []record.ContactEntry{{Feed: "f", Key: "k3", State: "pushed"}}); err != nil {
		t.Fatal(err)
	}
	if got := ledgerKeys(t, l, "f"); got != "k1,k2,k3" {
		t.Fatalf("keys after the import: %v", got)
	}
	var sends int
	if err := l.LoadSends(ctx, "f", func(record.SendEntry) error { sends++; return nil }); err != nil || sends != 1 {
		t.Fatalf("sends %d %v", sends, err)
	}
	l.Close()
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
	// A crash after the import committed, before the files went: they are
	// only removed.
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if l, err = NewFileLedger(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := ledgerKeys(t, l, "f"); got != "k1,k2,k3" {
		t.Fatalf("keys after a second start: %v", got)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", name, err)
		}
	}
}

// A second process (or a second open in this one) on the same ledger is
// refused, not blocked forever.
func TestFileLedgerHeldOnce(t *testing.T) {
	dir := t.TempDir()
	l, err := NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := NewFileLedger(dir); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open: %v", err)
	}
}

// RewriteContacts changes and removes entries, and the file keeps no byte
// of what it removed.
func TestFileLedgerRewriteContacts(t *testing.T) {
	dir := t.TempDir()
	l, err := NewFileLedger(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.RecordContacts(ctx, []record.ContactEntry{
		{Feed: "crm", Key: "a", ContactID: 918273645}, {Feed: "crm", Key: "b", ContactID: 7}, {Feed: "shop", Key: "c", ContactID: 918273645},
	}); err != nil {
		t.Fatal(err)
	}
	n, err := l.RewriteContacts(ctx, func(e *record.ContactEntry) (bool, bool) {
		if e.ContactID == 918273645 {
			return false, true
		}
		e.ContactIDHash, e.ContactID = "h7", 0
		return true, false
	})
	if err != nil || n != 3 {
		t.Fatalf("RewriteContacts = %d, %v", n, err)
	}
	if got := ledgerKeys(t, l, "crm") + "|" + ledgerKeys(t, l, "shop"); got != "b|" {
		t.Errorf("keys left %q", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ledgerDBName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "918273645") || !strings.Contains(string(raw), `"contact_id_hash":"h7"`) {
		t.Error("the ledger file keeps a removed contact id, or lacks the rewritten entry")
	}
}
