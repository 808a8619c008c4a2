package surveyapi

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// bubbleServer serves a handler in-process, without a socket, so that a
// test can run inside a testing/synctest bubble: the client's waits (auth
// probe interval, quota pause, Retry-After) and the handler's sleeps then
// run on the bubble's fake clock, instantly and deterministically.
type bubbleServer struct {
	URL  string
	hits atomic.Int64
	h    http.HandlerFunc
}

func newBubbleServer(t testing.TB, h http.HandlerFunc) *bubbleServer {
	t.Helper()
	return &bubbleServer{URL: "http://survey.invalid", h: h}
}

// with returns mod extended to route the client's requests to the handler.
func (s *bubbleServer) with(mod func(*Options)) func(*Options) {
	return func(o *Options) {
		o.HTTPClient = &http.Client{Transport: s}
		if mod != nil {
			mod(o)
		}
	}
}

// RoundTrip serves r with the handler and returns the recorded answer.
func (s *bubbleServer) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	s.hits.Add(1)
	in := r.Clone(r.Context())
	in.RequestURI = r.URL.RequestURI()
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	s.h(rec, in)
	res := rec.Result()
	res.Request = r
	return res, nil
}
