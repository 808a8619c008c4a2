package surveyapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/surveysync/surveysync/survey"
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

// BenchmarkDecodeResponse measures the decode alone: one encoding/json
// pass of the envelope straight into the typed result (what GetResponse
// does), on the body with spaces and compacted as the emulator sends it.
func BenchmarkDecodeResponse(b *testing.B) {
	body := responseJSON(testRID)
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		b.Fatal(err)
	}
	for name, in := range map[string][]byte{"compact": compact.Bytes(), "spaces": body} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				r, _, err := decodeResult[survey.Response]("", in, "application/json", false)
				if err != nil || checkResponse(r, testRID) != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeStrategies compares ways to decode the envelope of a
// detail, to justify the one used (docs/client.md "Decoding"):
// a streaming json.Decoder on the body, a two-step decode (meta +
// json.RawMessage, then the result), and one json.Unmarshal of the envelope
// with a typed result (the one used).
func BenchmarkDecodeStrategies(b *testing.B) {
	body := responseJSON(testRID)
	run := func(name string, f func() (*survey.Response, error)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r, err := f()
				if err != nil || r.ResponseID != testRID {
					b.Fatal(err)
				}
			}
		})
	}
	run("json_decoder_stream", func() (*survey.Response, error) {
		var env envelope[survey.Response]
		err := json.NewDecoder(bytes.NewReader(body)).Decode(&env)
		return env.Result, err
	})
	run("rawmessage_two_step", func() (*survey.Response, error) {
		var env struct {
			Meta   meta            `json:"meta"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			return nil, err
		}
		var r survey.Response
		err := json.Unmarshal(env.Result, &r)
		return &r, err
	})
	run("unmarshal_one_pass", func() (*survey.Response, error) {
		var env envelope[survey.Response]
		err := json.Unmarshal(body, &env)
		return env.Result, err
	})
}
