package kvstore

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// fillScan writes a database with two buckets of n entries each (values of a
// few hundred bytes, so the trees have branch pages and overflow pages),
// deletes every third entry (free pages), and returns what is left.
func fillScan(t *testing.T, path string, n int) map[string]map[string][]byte {
	t.Helper()
	// The same layout at every run, so that the damage below lands on the
	// same pages: the array free list allocates in page order (the map one
	// that Open uses does not), and each transaction changes one bucket
	// (bbolt writes a transaction's dirty buckets in a map's order).
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistArrayType})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]byte{"events": {}, "done": {}}
	names := []string{"done", "events"}
	rng := rand.New(rand.NewPCG(1, 2))
	for start := 0; start < n; start += 200 {
		for _, name := range names {
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte(name))
				if err != nil {
					return err
				}
				for i := start; i < min(n, start+200); i++ {
					v := bytes.Repeat([]byte{byte(i)}, 100+rng.IntN(400))
					if i%97 == 0 {
						v = bytes.Repeat([]byte{'x'}, 9000) // an overflow page
					}
					if err := b.Put(Key(uint64(i)), v); err != nil {
						return err
					}
					want[name][string(Key(uint64(i)))] = v
				}
				_, err = b.NextSequence()
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range names {
		err = db.Update(func(tx *bolt.Tx) error {
			for i := 0; i < n; i += 3 {
				if err := tx.Bucket([]byte(name)).Delete(Key(uint64(i))); err != nil {
					return err
				}
				delete(want[name], string(Key(uint64(i))))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !HasFreePages(db) {
		t.Fatal("no free pages: the test proves less")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

func TestScanSoundFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	want := fillScan(t, path, 3000)
	res, err := Scan(path, true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Damaged() {
		t.Fatalf("a sound file reported damaged: %s", res.Summary())
	}
	if res.Pages < 50 {
		t.Fatalf("read %d pages: the tree is too small to test", res.Pages)
	}
	for name, kvs := range want {
		b := res.Buckets[name]
		if b == nil || b.Damaged || len(b.Entries) != len(kvs) || b.Sequence != 15 {
			t.Fatalf("bucket %s: %+v", name, b)
		}
		for _, kv := range b.Entries {
			if !bytes.Equal(kvs[string(kv.Key)], kv.Value) {
				t.Fatalf("bucket %s key %x: value differs", name, kv.Key)
			}
		}
	}
}

// usedPage returns the root page of the events bucket's tree (a page in
// use, whatever the layout).
func usedPage(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int
	err = db.View(func(tx *bolt.Tx) error {
		root = int(tx.Bucket([]byte("events")).Root())
		return nil
	})
	if err != nil || root < 2 {
		t.Fatalf("the events bucket's root: %d, %v", root, err)
	}
	return root
}

// TestScanDamagedFile garbles a file as a disk or an operator would, and
// checks that Scan reports it, salvages the readable entries (each one
// exact), and never panics; bbolt itself would panic on these files.
func TestScanDamagedFile(t *testing.T) {
	var inUse int // the events tree's root page (usedPage)
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"noise over a page in use", func(b []byte) []byte {
			rng := rand.New(rand.NewPCG(3, 4))
			mid := inUse * 4096
			for i := mid; i < mid+4096; i++ {
				b[i] = byte(rng.Uint32())
			}
			return b
		}},
		{"truncated", func(b []byte) []byte { return b[:len(b)/3] }},
		{"zero-filled block", func(b []byte) []byte {
			mid := len(b) / 3 &^ 4095
			clear(b[mid : mid+8192])
			return b
		}},
		{"zero-filled file", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"noise at the start", func(b []byte) []byte {
			rng := rand.New(rand.NewPCG(5, 6))
			for i := 0; i < 8192; i++ {
				b[i] = byte(rng.Uint32())
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.db")
			want := fillScan(t, path, 3000)
			inUse = usedPage(t, path)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := Scan(path, true)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Damaged() {
				t.Fatal("damage not found")
			}
			got := 0
			for name, sb := range res.Buckets {
				for _, kv := range sb.Entries {
					v, ok := want[name][string(kv.Key)]
					if !ok || !bytes.Equal(v, kv.Value) {
						t.Fatalf("bucket %s: salvaged key %x is not what was written", name, kv.Key)
					}
					got++
				}
			}
			t.Logf("%s; salvaged %d of %d entries", res.Summary(), got, len(want["events"])+len(want["done"]))
		})
	}
}

func TestScanRandomHistory(t *testing.T) {
	// Many small transactions of puts and deletes, as the spool makes:
	// no false alarm on any state of the file.
	path := filepath.Join(t.TempDir(), "s.db")
	db, err := Open(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	next := uint64(0)
	for round := 0; round < 40; round++ {
		for tx := 0; tx < 20; tx++ {
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("events"))
				if err != nil {
					return err
				}
				for i := 0; i < 1+rng.IntN(60); i++ {
					next++
					if err := b.Put(Key(next), bytes.Repeat([]byte("v"), rng.IntN(2000))); err != nil {
						return err
					}
				}
				c := b.Cursor()
				for k, _ := c.First(); k != nil && rng.IntN(3) > 0; k, _ = c.Next() {
					if err := c.Delete(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		res, err := Scan(path, false)
		if err != nil || res.Damaged() {
			t.Fatalf("round %d: %v %s", round, err, res.Summary())
		}
		if db, err = Open(path, "test"); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
}
