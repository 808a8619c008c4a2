package surveyapi

import (
	"context"
	"net/http"
	"strconv"
	"testing"

	"github.com/surveysync/surveysync/pipeline/survey"
)

// BenchmarkGetResponse measures the whole client path against a local
// server serving a realistic detail (8 pages, 20 questions, 40 answers,
// ~7 KB). Allocations include the in-process server's.
//
//	go test -run '^$' -bench 'GetResponse|Decode' -benchmem ./source/surveyapi
func BenchmarkGetResponse(b *testing.B) {
	body := responseJSON(testRID)
	s := newServer(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	h := newClient(b, s.URL, func(o *Options) { o.Logger = nil; o.Registerer = nil; o.MaxConcurrency = 64 })
	ctx := context.Background()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, err := h.c.GetResponse(ctx, 4574, testRID)
			if err != nil || len(r.Pages) != 8 {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkDecodeResponse measures the decode alone: the fast path
// (fastjson.go, what GetResponse uses) against one encoding/json pass of
// the envelope straight into the typed result.
func BenchmarkDecodeResponse(b *testing.B) {
	body := responseJSON(testRID)
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, _, err := decodeFast(OpGetResponse, 200, "", body, "application/json", fastResponse)
			if err != nil || checkResponse(r, testRID) != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, _, err := decodeResult[survey.Response](OpGetResponse, 200, "", body, "application/json", false)
			if err != nil || checkResponse(r, testRID) != nil {
				b.Fatal(err)
			}
		}
	})
}
