package parquet

import (
	"bytes"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
)

func TestSharedZstdCodec(t *testing.T) {
	c, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*sharedZstd); !ok {
		t.Fatalf("zstd codec is %T, want *sharedZstd", c)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := bytes.Repeat([]byte("Příliš žluťoučký kůň "), 1000+i)
			for _, level := range []int{compress.DefaultCompressionLevel, 1} {
				enc := c.EncodeLevel(nil, src, level)
				if dec := c.Decode(make([]byte, len(src)), enc); !bytes.Equal(dec, src) {
					t.Errorf("level %d: round trip differs", level)
				}
			}
		}()
	}
	wg.Wait()
}
