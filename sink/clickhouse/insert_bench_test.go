package clickhouse

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
)

// BenchmarkInsertAnswers compares, in one run, the raw clickhouse-go/v2
// insert rate of answers rows (Go slices prepared beforehand, column-wise
// Append, 100k-row batches) with Sink.Write of the same rows as an Arrow
// record (conversion + append + send). Needs a server:
//
//	SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000 \
//	  go test -run '^$' -bench InsertAnswers -benchtime 20x ./sink/clickhouse/
func BenchmarkInsertAnswers(b *testing.B) {
	s, _ := openTest(b, nil)
	const responses, perResponse = 10_000, 10 // 100k answers rows per batch
	mem := memory.NewGoAllocator()
	var rs []testResponse
	done := baseTime.Add(time.Hour)
	for i := range responses {
		rs = append(rs, testResponse{ID: guid(i), SurveyID: int64(i % 20), Version: 1, Completed: &done, Answers: perResponse})
	}
	batch := buildBatch(mem, rs)
	defer batch.Release()
	rows := int(batch.Answers.NumRows())
	query := insertSQL(s.table(flatten.TableAnswers), flatten.AnswersSchema)

	// The raw path's column slices, converted once outside the timing.
	cols := make([]any, batch.Answers.NumCols())
	for i, f := range batch.Answers.Schema().Fields() {
		v, err := new(conv).values(batch.Answers.Column(i), f, uuidColumns[f.Name])
		if err != nil {
			b.Fatal(err)
		}
		cols[i] = v
	}
	only := &flatten.Batch{Answers: batch.Answers}
	// Each iteration inserts the batch once each way, alternating, so that
	// the machine's load swings hit both alike.
	var raw, write time.Duration
	for b.Loop() {
		start := time.Now()
		chb, err := s.Conn().PrepareBatch(ctxT(b), query)
		if err != nil {
			b.Fatal(err)
		}
		for i, v := range cols {
			if err := chb.Column(i).Append(v); err != nil {
				b.Fatal(err)
			}
		}
		if err := chb.Send(); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(start)

		start = time.Now()
		if err := s.Write(ctxT(b), only); err != nil {
			b.Fatal(err)
		}
		write += time.Since(start)
	}
	rawRate := float64(b.N*rows) / raw.Seconds()
	writeRate := float64(b.N*rows) / write.Seconds()
	b.ReportMetric(rawRate, "raw-rows/s")
	b.ReportMetric(writeRate, "write-rows/s")
	b.ReportMetric(100*writeRate/rawRate, "write/raw-%")
}
