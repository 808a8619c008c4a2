package clickhouse

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkCopyFrom measures CopyFrom (the rows read over its own
// connection and inserted by surveysync) against the server-to-server
// INSERT … SELECT FROM remote() it replaced (which put the source's
// password into the query), on one test server: 640,000 answers rows.
//
//	go test -run '^$' -bench BenchmarkCopyFrom -benchtime 3x ./sink/clickhouse/
func BenchmarkCopyFrom(b *testing.B) {
	src, _ := openTest(b, nil)
	ctx := ctxT(b)
	var rs []testResponse
	for i := range 1000 {
		rs = append(rs, testResponse{ID: guid(i), SurveyID: int64(1 + i%3), Version: 10, Answers: 5, Params: [][2]string{{"src", "mail"}}})
	}
	writeBatch(b, src, rs)
	for range 7 { // 2^7 copies of each row: what FINAL collapses alike on both sides
		if err := src.Conn().Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT * FROM %s", src.table("answers"), src.table("answers"))); err != nil {
			b.Fatal(err)
		}
	}
	var rows uint64
	if err := src.Conn().QueryRow(ctx, "SELECT count() FROM "+src.table("answers")).Scan(&rows); err != nil {
		b.Fatal(err)
	}
	b.Run("client", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			dst, _ := openTest(b, nil)
			reps, err := dst.CopyFrom(ctx, CopySource{Addr: testAddrs()[0], Database: src.Database()})
			if err != nil {
				b.Fatal(err)
			}
			took += reps[0].Took // answers
		}
		b.ReportMetric(float64(rows)*float64(b.N)/took.Seconds(), "answers_rows/s")
	})
	b.Run("remote", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			dst, _ := openTest(b, nil)
			t0 := time.Now()
			if err := dst.Conn().Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT * FROM remote('%s', %s, answers)", dst.table("answers"), testAddrs()[0], src.Database())); err != nil {
				b.Fatal(err)
			}
			took += time.Since(t0)
		}
		b.ReportMetric(float64(rows)*float64(b.N)/took.Seconds(), "answers_rows/s")
	})
}
