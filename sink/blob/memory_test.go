package blob

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A 100 MB file is copied with memory flat: what the process allocates in
// all (the test's own HTTP server included) stays far below the file's size,
// and the live heap stays small throughout.
func TestLargeFileMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB copy")
	}
	size := int64(100 << 20)
	if s := os.Getenv("SURVEYSYNC_TEST_BIGFILE_MB"); s != "" {
		n, _ := strconv.Atoi(s)
		size = int64(n) << 20
	}
	stores(t, func(t *testing.T, st *Store) {
		fs := newFileServer(t)
		r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-0000000b1600")
		fs.add(r.FileID, fileSpec{size: size, name: czechName, ctype: "application/pdf"})
		want := sha256Of(r.FileID, size)
		c := NewCopier(st, fs.downloader(), nil, testOptions(t))

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			var ms runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
				}
			}
		}()
		start := time.Now()
		got, err := c.Copy(context.Background(), r)
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		heapGrowth := int64(peak.Load()) - int64(before.HeapInuse)
		t.Logf("%d MB in %v: TotalAlloc %.1f MB, peak heap in use +%.1f MB", size>>20, elapsed, float64(alloc)/(1<<20), float64(heapGrowth)/(1<<20))
		if got.SHA256 != want || got.Size != size {
			t.Fatalf("copied %+v, want sha %s", got, want)
		}
		if sum, n := readSHA(t, st, r.Key()); sum != want || n != size {
			t.Fatalf("object sha %s size %d", sum, n)
		}
		if alloc > 16<<20 {
			t.Errorf("copying 100 MB allocated %.1f MB in all; want < 16 MB (memory must not grow with the file)", float64(alloc)/(1<<20))
		}
		if heapGrowth > 16<<20 {
			t.Errorf("peak heap grew by %.1f MB; want < 16 MB", float64(heapGrowth)/(1<<20))
		}
	})
}
