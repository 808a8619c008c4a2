package kvstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// fill writes a database of a few hundred pages: two buckets, one with
// nested buckets, values from a few bytes to a few pages.
func fill(t *testing.T, path string) {
	t.Helper()
	db, err := Open(path, "test store")
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		a, err := tx.CreateBucketIfNotExists([]byte("a"))
		if err != nil {
			return err
		}
		for i := range 1500 {
			if err := a.Put(Key(uint64(i)), []byte(strings.Repeat(fmt.Sprint(i), 1+i%40))); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for f := range 5 {
			nb, err := b.CreateBucketIfNotExists(fmt.Appendf(nil, "feed-%d", f))
			if err != nil {
				return err
			}
			for i := range 40 {
				if err := nb.Put(Key(uint64(i)), make([]byte, 50+i*150)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads every key and value, as a store's load does.
func readAll(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return checkBucket(b, "") })
	})
}

// Every kind of damage is a DamagedError naming the file, or (damage in
// pages nothing reaches) a database that opens and reads whole: never a
// panic, never an error of another kind.
func TestDamagedFileIsAnErrorNeverAPanic(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	fill(t, clean)
	orig, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	type damage struct {
		name string
		fn   func([]byte) []byte
	}
	noise := func(seed uint64, at, n int) func([]byte) []byte {
		return func(b []byte) []byte {
			r := rand.New(rand.NewPCG(seed, 1))
			for i := at; i < at+n && i < len(b); i++ {
				b[i] = byte(r.Uint32())
			}
			return b
		}
	}
	damages := []damage{
		{"cut in half", func(b []byte) []byte { return b[:len(b)/2] }},
		{"cut to one page", func(b []byte) []byte { return b[:page] }},
		{"cut to a few bytes", func(b []byte) []byte { return b[:100] }},
		{"zero-filled", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"both meta pages noise", noise(1, 0, 2*page)},
		{"4 KiB of noise in the middle", noise(2, len(orig)/2, page)},
		{"4 KiB of noise at a page's middle", noise(3, len(orig)/2+page/2, page)},
	}
	// Noise and zeros over pages spread over the file.
	for p := 2; p*page < len(orig); p += max(1, len(orig)/page/40) {
		damages = append(damages,
			damage{fmt.Sprintf("noise over page %d", p), noise(uint64(p), p*page, page)},
			damage{fmt.Sprintf("zeros over page %d", p), func(b []byte) []byte { clear(b[p*page : (p+1)*page]); return b }},
			damage{fmt.Sprintf("64 bytes of noise in page %d's header", p), noise(uint64(p)+1000, p*page, 64)})
	}
	var refused, opened int
	for i, d := range damages {
		path := filepath.Join(dir, fmt.Sprintf("d%d.db", i))
		if err := os.WriteFile(path, d.fn(append([]byte(nil), orig...)), 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, "test store")
		if err != nil {
			var de *DamagedError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) || de.Path != path || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %v (%T), want a DamagedError naming %s", d.name, err, err, path)
			}
			refused++
			continue
		}
		if err := readAll(db); err != nil {
			t.Errorf("%s: opened, then a read fails: %v", d.name, err)
		}
		_ = db.Close()
		opened++
	}
	t.Logf("%d damaged files refused, %d opened and read whole (damage inside values or in free pages, which bbolt does not checksum)", refused, opened)
	if refused < 7 {
		t.Errorf("only %d damaged files refused", refused)
	}
}

// SetAside moves the file away; the next Open starts an empty database.
func TestSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	fill(t, path)
	if err := os.Truncate(path, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, "x"); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open: %v", err)
	}
	aside, err := SetAside(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(aside, path+".damaged-") {
		t.Errorf("set aside as %s", aside)
	}
	db, err := Open(path, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := readAll(db); err != nil {
		t.Fatal(err)
	}
}

// A file held by another opener is ErrInUse, not damaged.
func TestInUseIsNotDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	fill(t, path)
	db, err := Open(path, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := Check(path, "x"); !errors.Is(err, ErrInUse) {
		t.Errorf("check of a held file: %v, want ErrInUse", err)
	}
}
