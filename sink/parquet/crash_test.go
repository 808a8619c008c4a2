package parquet

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/surveysync/surveysync/pipeline/flatten"
)

const crashDirEnv = "SURVEYSYNC_PARQUET_CRASH_DIR"

// TestCrashHelper is the child of TestSIGKILLMidWrite: it writes batches
// until it is killed.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestSIGKILLMidWrite")
	}
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	items := benchItems(300)
	b := flatten.NewBuilder(memory.DefaultAllocator)
	for v := uint64(time.Now().UnixNano()); ; v++ { // versions, so names, new each run
		for i := range items {
			items[i].Version = v
			if err := b.Add(items[i]); err != nil {
				t.Fatal(err)
			}
		}
		batch := b.Flush()
		if err := s.Write(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		batch.Release()
	}
}

// TestSIGKILLMidWrite kills a writing process at random points: every
// visible file must be a complete Parquet file, and Open must remove the
// temporary ones.
func TestSIGKILLMidWrite(t *testing.T) {
	dir := t.TempDir()
	visible := func() []string {
		paths, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*", "*.parquet"))
		return paths
	}
	for round := range 4 {
		before := len(visible())
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Let it write a few files, then kill it at an arbitrary point
		// of the next ones.
		deadline := time.Now().Add(60 * time.Second)
		for len(visible()) < before+2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		paths := visible()
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		for _, path := range paths {
			pf, err := file.OpenParquetFile(path, false)
			if err != nil {
				t.Fatalf("round %d: visible file %s is not readable: %v", round, path, err)
			}
			fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := fr.ReadTable(context.Background())
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, path, err)
			}
			tbl.Release()
			pf.Close()
		}
		mem.AssertSize(t, 0)
		temps := len(tempFiles(t, dir))
		s, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if left := tempFiles(t, dir); len(left) > 0 {
			t.Fatalf("Open left %v", left)
		}
		t.Logf("round %d: %d complete files, %d temporary files removed", round, len(paths), temps)
	}
}
