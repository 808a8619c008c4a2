package parquet

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/wide"
)

// TestExportWideTiming writes a survey of 100,000 responses × 50 questions
// through the Parquet sink (the shape of sink/clickhouse's
// TestWideViewTiming: 20 single choice, 5 multiple choice of 3 answers, 5
// matrices of 5 rows, 5 scales, 10 open texts, 5 multiple-answer matrices
// of 2 rows × 2 answers; 95 answer cells per response; 10% of the responses
// in a second version, 1% deleted; batches of 1,000 responses) into
// SURVEYSYNC_BENCH_WIDE_PARQUET_DIR (kept, reused when it has the survey),
// then times ExportWide to CSV. It only runs with that variable set:
//
//	SURVEYSYNC_BENCH_WIDE_PARQUET_DIR=/tmp/widebench go test -count=1 -run TestExportWideTiming -v ./sink/parquet/
//
// The command's memory is measured with the binary on the same folder
// (docs/benchmarks.md).
func TestExportWideTiming(t *testing.T) {
	dir := os.Getenv("SURVEYSYNC_BENCH_WIDE_PARQUET_DIR")
	if dir == "" {
		t.Skip("set SURVEYSYNC_BENCH_WIDE_PARQUET_DIR to time the Parquet sink's wide export")
	}
	ctx := context.Background()
	const survey777, responses, perBatch = 777, 100_000, 1000
	if _, err := os.Stat(fmt.Sprintf("%s/responses/survey_id=%d", dir, survey777)); err != nil {
		s, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		at := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
		write := func(items []flatten.Item) {
			b := flatten.NewBuilder(memory.NewGoAllocator())
			defer b.Release()
			for _, it := range items {
				if err := b.Add(it); err != nil {
					t.Fatal(err)
				}
			}
			batch := b.Flush()
			defer batch.Release()
			if err := s.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		for pass := 0; pass < 3; pass++ {
			var items []flatten.Item
			for r := 0; r < responses; r++ {
				switch {
				case pass == 1 && r%10 != 0, pass == 2 && r%100 != 1:
					continue
				}
				id := survey.GUID(fmt.Sprintf("00000000-0000-4000-8000-%012d", r))
				it := flatten.Item{SurveyID: survey777, ResponseID: id, Version: uint64(1000*(pass+1) + 0), SyncedAt: at}
				if pass == 2 {
					it.Deleted = true
				} else {
					resp := benchResponse(r, id, at)
					it.Response = &resp
				}
				items = append(items, it)
				if len(items) == perBatch {
					write(items)
					items = items[:0]
				}
			}
			if len(items) > 0 {
				write(items)
			}
		}
		s.Close()
		t.Logf("wrote %d responses in %v", responses, time.Since(start).Round(time.Millisecond))
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	n, err := ExportWide(ctx, dir, survey777, WideOptions{}, func(fields []wide.Field) (wide.Writer, error) {
		return wide.NewCSV(io.Discard, fields, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("ExportWide CSV: %d rows in %v (heap now %d MB, total allocated %d MB)", n, time.Since(start).Round(time.Millisecond),
		after.HeapInuse>>20, (after.TotalAlloc-before.TotalAlloc)>>20)
	if n != 99_000 {
		t.Errorf("%d rows, want 99,000", n)
	}
}

// benchResponse is response r of TestExportWideTiming's survey.
func benchResponse(r int, id survey.GUID, at time.Time) survey.Response {
	resp := survey.Response{
		ResponseID: id, SurveyID: 777, SurveyName: "Průzkum spokojenosti", IPAddress: "10.0.0.1",
		DateCreated:    survey.Time{Time: at.Add(time.Duration(r) * time.Second)},
		DateCompleted:  &survey.Time{Time: at.Add(time.Duration(r)*time.Second + 10*time.Minute)},
		TotalTime:      survey.Int(600),
		ResponseStatus: survey.StatusCompleted,
		URLParameters:  []survey.URLParameter{{Name: "utm_source", Value: "mail"}},
	}
	label := func(c int) *string { return survey.Str(fmt.Sprintf("Možnost %d", (r+c)%5)) }
	col := func(c int) *string { return survey.Str(fmt.Sprintf("Sloupec %d", (r+c)%5)) }
	c := 0
	for p := 0; p < 5; p++ {
		page := survey.Page{ID: int64(1 + p)}
		for qi := 0; qi < 10; qi++ {
			q := p*10 + qi
			qq := survey.Question{ID: int64(1000 + q), Title: fmt.Sprintf("Otázka č. %d", q), Variable: fmt.Sprintf("otazka_%d", q)}
			switch {
			case q < 20:
				qq.Type = "single"
				qq.Answers = []survey.Answer{{ChoiceID: survey.Int(int64(100 + (r+c)%5)), ChoiceLabel: label(c)}}
				c++
			case q < 25:
				qq.Type = "multiple"
				for a := 0; a < 3; a++ {
					qq.Answers = append(qq.Answers, survey.Answer{ChoiceID: survey.Int(int64(100 + (r+c)%5)), ChoiceLabel: label(c)})
					c++
				}
			case q < 30:
				qq.Type = "matrix_single"
				for row := 1; row <= 5; row++ {
					qq.Answers = append(qq.Answers, survey.Answer{RowID: survey.Int(int64(row)), RowLabel: survey.Str(fmt.Sprintf("Řádek %d", row)),
						ColumnID: survey.Int(int64(50 + (r+c)%5)), ColumnLabel: col(c)})
					c++
				}
			case q < 35:
				qq.Type = "scale"
				qq.Answers = []survey.Answer{{Value: survey.Int(int64((r + c) % 11))}}
				c++
			case q < 45:
				qq.Type = "essay"
				qq.Answers = []survey.Answer{{Text: survey.Str(fmt.Sprintf("Příliš žluťoučký kůň %d", r))}}
				c++
			default:
				qq.Type = "matrix_multiple"
				for row := 1; row <= 2; row++ {
					for a := 0; a < 2; a++ {
						qq.Answers = append(qq.Answers, survey.Answer{RowID: survey.Int(int64(row)), RowLabel: survey.Str(fmt.Sprintf("Řádek %d", row)),
							ColumnID: survey.Int(int64(50 + (r+c)%5)), ColumnLabel: col(c)})
						c++
					}
				}
			}
			page.Questions = append(page.Questions, qq)
		}
		resp.Pages = append(resp.Pages, page)
	}
	return resp
}
