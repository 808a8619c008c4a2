package parquet

import (
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// arrow-go/v18's zstd codec builds a new encoder (with megabytes of
// tables) for every page it compresses; with the default level this codec
// uses one shared encoder instead (EncodeAll is safe for concurrent use).
// The output is the same zstd format. arrow-go v18 pools its encoders: drop
// this file when moving there.
type sharedZstd struct {
	compress.Codec // the stock codec, for everything else

	once sync.Once
	enc  *zstd.Encoder
}

func (z *sharedZstd) EncodeLevel(dst, src []byte, level int) []byte {
	if level != compress.DefaultCompressionLevel {
		return z.Codec.EncodeLevel(dst, src, level)
	}
	z.once.Do(func() {
		z.enc, _ = zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(zstd.SpeedDefault))
	})
	return z.enc.EncodeAll(src, dst[:0])
}

func init() {
	stock, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		panic(err)
	}
	compress.RegisterCodec(compress.Codecs.Zstd, &sharedZstd{Codec: stock})
}
