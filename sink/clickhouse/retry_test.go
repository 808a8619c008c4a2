package clickhouse

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// cutProxy forwards TCP connections to target; when armed, it cuts the
// next connection that sends more than cutAfter bytes to the server.
type cutProxy struct {
	ln       net.Listener
	target   string
	cutAfter int64
	armed    atomic.Bool
	cuts     atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newCutProxy(t *testing.T, target string, cutAfter int64) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, cutAfter: cutAfter}
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() {
			defer c.Close()
			defer s.Close()
			var sent int64
			buf := make([]byte, 32*1024)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					sent += int64(n)
					if sent > p.cutAfter && p.armed.CompareAndSwap(true, false) {
						p.cuts.Add(1)
						return // cut both directions mid-insert
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		p.wg.Go(func() {
			_, _ = io.Copy(c, s)
			c.Close()
		})
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// A connection cut in the middle of an insert: Write fails transiently
// (neither permanent nor refused, so the pipeline writes it again), the
// next Write goes through a new connection, and the views show every row
// once.
func TestWriteAgainAfterBrokenConnection(t *testing.T) {
	if testAddr() == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	proxy := newCutProxy(t, testAddrs()[0], 256*1024)
	s, _ := openTest(t, func(o *Options) { o.Addr = []string{proxy.ln.Addr().String()} })
	done := baseTime.Add(time.Hour)
	var rs []testResponse
	for i := range 2000 {
		rs = append(rs, testResponse{ID: guid(i), SurveyID: 1, Version: 5, Completed: &done, Answers: 10})
	}
	proxy.armed.Store(true)
	if failed := writeRetrying(t, s, rs, 4); failed != 1 {
		t.Errorf("%d failed writes, want 1", failed)
	}
	if proxy.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", proxy.cuts.Load())
	}
	if got := testutil.ToFloat64(s.metrics.insertErrors.WithLabelValues("answers", "none")); got != 1 {
		t.Errorf("insert_errors_total{table=answers} = %v, want 1", got)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("answers_current")); n != 20000 {
		t.Errorf("answers_current has %d rows, want 20000", n)
	}
	if n := countRows(t, s, "SELECT count() FROM "+s.table("responses_current")); n != 2000 {
		t.Errorf("responses_current has %d rows, want 2000", n)
	}
}
