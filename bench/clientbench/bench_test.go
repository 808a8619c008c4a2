package clientbench_test

import (
	"sync/atomic"
	"testing"
)

// BenchmarkEmulatorDetail/{raw,client}: the same comparison as
// TestClientVsEmulator as Go benchmarks (16 goroutines), for profiling:
//
//	go test -run '^$' -bench EmulatorDetail -benchmem -cpuprofile cpu.prof ./bench/clientbench/
func BenchmarkEmulatorDetail(b *testing.B) {
	e := newEnv(b, 100000)
	raw, closeRaw := rawGetter(e, 16)
	defer closeRaw()
	cli := clientGetter(b, e, 16)
	for _, bc := range []struct {
		name string
		do   func(int) error
	}{{"raw", raw}, {"client", cli}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
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
