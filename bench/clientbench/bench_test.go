package clientbench_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkEmulatorDetail/{raw,lean,client}/{16,256}: the same comparison as
// TestClientVsEmulator as Go benchmarks, for profiling:
//
//	go test -run '^$' -bench EmulatorDetail -benchmem -cpuprofile cpu.prof ./bench/clientbench/
func BenchmarkEmulatorDetail(b *testing.B) {
	e := newEnv(b, 100000)
	for _, conc := range []int{16, 256} {
		raw, closeRaw := rawGetter(e, conc)
		defer closeRaw()
		lean, closeLean := leanGetter(e, conc)
		defer closeLean()
		cli := clientGetter(b, e, conc)
		benchCallers(b, conc, raw, lean, cli)
	}
}

func benchCallers(b *testing.B, conc int, raw, lean, cli func(int) error) {
	for _, bc := range []struct {
		name string
		do   func(int) error
	}{{"raw", raw}, {"lean", lean}, {"client", cli}} {
		b.Run(fmt.Sprintf("%s/%d", bc.name, conc), func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(conc / runtime.GOMAXPROCS(0))
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := bc.do(int(n.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
