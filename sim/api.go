package sim

import (
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// Handler returns the emulator's HTTP handler: the API under /v1/..., the
// control API under /_sim/... (docs/emulator.md).
func (s *Sim) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// call is one API request being answered.
type call struct {
	s   *Sim
	w   http.ResponseWriter
	r   *http.Request
	op  string
	req guid16
	eff effects
	enc encOpts
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func (s *Sim) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if strings.HasPrefix(path, "/_sim/") || path == "/_sim" {
		s.serveControl(w, r)
		return
	}
	seq := s.reqSeq.Add(1)
	c := &call{s: s, w: w, r: r, op: opOther}
	rr := newRNG(s.key, seq, 0x4e9)
	c.req = randomGUID(rr.next(), rr.next())
	seg, ok := splitPath(path)
	var handle func(*call, []string)
	method := http.MethodGet
	if ok {
		switch {
		case len(seg) == 3 && seg[0] == "surveys" && seg[2] == "responses":
			c.op, handle = OpListResponses, (*call).listResponses
		case len(seg) == 4 && seg[0] == "surveys" && seg[2] == "responses":
			c.op, handle = OpGetResponse, (*call).getResponse
		case len(seg) == 6 && seg[0] == "surveys" && seg[2] == "responses" && seg[4] == "uploaded-files":
			c.op, handle = OpDownloadFile, (*call).downloadFile
		case len(seg) == 3 && seg[0] == "distributions" && seg[2] == "contacts":
			c.op, handle, method = OpCreateContact, (*call).createContact, http.MethodPost
		case len(seg) == 5 && seg[0] == "distributions" && seg[2] == "messages" && seg[4] == "send":
			c.op, handle, method = OpSendMessage, (*call).sendMessage, http.MethodPost
		}
	}
	s.calls.add(c.op)
	if !s.authorized(r) {
		c.fail(http.StatusUnauthorized, "Invalid API token")
		return
	}
	if handle == nil {
		c.fail(http.StatusNotFound, "Endpoint not found")
		return
	}
	if r.Method != method {
		c.w.Header().Set("Allow", method)
		c.fail(http.StatusMethodNotAllowed, "Method not allowed")
		return
	}
	var sid int64
	if len(seg) > 1 && seg[0] == "surveys" {
		sid, _ = strconv.ParseInt(seg[1], 10, 64)
	}
	var rid string
	if c.op == OpGetResponse || c.op == OpDownloadFile {
		rid = seg[3]
	}
	c.eff = s.faults.decide(c.op, sid, rid)
	c.enc = encOpts{upper: c.eff.upper, noTitle: c.eff.noTitle, qfAsDisq: c.eff.qfAsDisq, badDate: c.eff.badDate}
	if c.eff.variant {
		c.enc.variant = int(seq % 4)
	}
	if c.eff.delay > 0 {
		t := time.NewTimer(c.eff.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if c.eff.reset && c.op != OpDownloadFile {
		c.reset()
		return
	}
	if c.eff.status != 0 {
		if c.eff.hasRetryAfter {
			secs := int64((c.eff.retryAfter + time.Second - 1) / time.Second)
			c.w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		c.fail(c.eff.status, faultMessage(c.eff.status))
		return
	}
	handle(c, seg)
}

func splitPath(p string) ([]string, bool) {
	rest, ok := strings.CutPrefix(p, "/v1/")
	if !ok {
		return nil, false
	}
	rest = strings.TrimSuffix(rest, "/")
	return strings.Split(rest, "/"), true
}

func (s *Sim) authorized(r *http.Request) bool {
	tok := r.Header.Get("X-API-TOKEN")
	if tok == "" {
		return false
	}
	if s.opts.Token == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) == 1
}

func faultMessage(status int) string {
	switch status {
	case 400:
		return "Bad request"
	case 401:
		return "Invalid API token"
	case 402:
		return "The monthly API request limit of your plan has been reached"
	case 403:
		return "You do not have permission to access this data"
	case 404:
		return "Not found"
	case 405:
		return "Required fields missing"
	case 429:
		return "Too many requests"
	case 500:
		return "Internal server error"
	case 502:
		return "Bad gateway"
	case 503:
		return "Service temporarily unavailable"
	}
	return http.StatusText(status)
}

// reset drops the connection without an answer.
func (c *call) reset() {
	if hj, ok := c.w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// fail answers with the service's error body.
func (c *call) fail(status int, msg string) {
	bp := bufPool.Get().(*[]byte)
	b := appendErrorBody((*bp)[:0], c.req, status, msg, c.enc)
	c.write(status, b)
	*bp = b
	bufPool.Put(bp)
}

func (c *call) write(status int, b []byte) {
	h := c.w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	c.w.WriteHeader(status)
	c.w.Write(b)
}

// ok answers status with the envelope around result (already encoded).
func (c *call) ok(status int, result func(b []byte) []byte) {
	bp := c.render(status, result)
	c.write(status, *bp)
	putBuf(bp)
}

// render encodes the envelope around result into a pooled buffer.
func (c *call) render(status int, result func(b []byte) []byte) *[]byte {
	bp := bufPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"result":`...)
	b = result(b)
	b = append(b, ',')
	b = appendMeta(b, c.req, status, c.enc)
	*bp = append(b, "}}"...)
	return bp
}

func putBuf(bp *[]byte) {
	if cap(*bp) <= 1<<20 {
		bufPool.Put(bp)
	}
}

func (c *call) surveyID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		c.fail(http.StatusNotFound, "Survey not found")
		return 0, false
	}
	return id, true
}

// strValues decides, per response, whether scale values go as strings: the
// service sometimes sends numbers as text.
func strValues(id guid16) bool { return id[15]%4 == 0 }

func (c *call) getResponse(seg []string) {
	sid, ok := c.surveyID(seg[1])
	if !ok {
		return
	}
	id, ok := parseGUID16(seg[3])
	if !ok {
		c.fail(http.StatusNotFound, "Response not found")
		return
	}
	s := c.s
	now := s.nowNS()
	s.mu.RLock()
	sv, found := s.survey(sid)
	if !found {
		s.mu.RUnlock()
		c.fail(http.StatusNotFound, "Survey not found")
		return
	}
	r, found := sv.current(id, now)
	s.mu.RUnlock()
	if !found {
		c.fail(http.StatusNotFound, "Response not found")
		return
	}
	c.enc.strValues = strValues(id)
	c.ok(http.StatusOK, func(b []byte) []byte { return appendResponse(b, &r, c.enc) })
}

func (c *call) listResponses(seg []string) {
	sid, ok := c.surveyID(seg[1])
	if !ok {
		return
	}
	q, msg := parseListQuery(c.r)
	if msg != "" {
		c.fail(http.StatusBadRequest, msg)
		return
	}
	s := c.s
	if c.eff.shift {
		s.shift(sid, &q)
	}
	now := s.nowNS()
	s.mu.RLock()
	sv, found := s.survey(sid)
	if !found {
		s.mu.RUnlock()
		c.fail(http.StatusNotFound, "Survey not found")
		return
	}
	if !sv.built {
		s.mu.RUnlock()
		s.mu.Lock()
		sv.ensureBuilt()
		s.mu.Unlock()
		s.mu.RLock()
	}
	var ids []int32
	if c.eff.list&listRepeat != 0 {
		// The first page of the status's list, whatever else was asked.
		q.hasSC, q.hasEC, q.hasSS, q.hasES, q.page = false, false, false, false, 1
	}
	ids = sv.list(&q, now)
	total := len(ids)
	from, to := pageBounds(q.page, q.perPage, total)
	page := ids[from:to]
	page, total = c.hostileList(ids, page, total, q.page, q.perPage)
	scheme := "http"
	if c.r.TLS != nil {
		scheme = "https"
	}
	prefix := scheme + "://" + c.r.Host + "/v1/surveys/" + seg[1] + "/responses/"
	// Render under the lock (ids may alias the index), write after it: a
	// slow client must not hold the lock.
	bp := c.render(http.StatusOK, func(b []byte) []byte {
		b = append(b, `{"per_page":`...)
		b = strconv.AppendInt(b, int64(q.perPage), 10)
		b = append(b, `,"page":`...)
		b = strconv.AppendInt(b, int64(q.page), 10)
		b = append(b, `,"total":`...)
		b = strconv.AppendInt(b, int64(total), 10)
		b = append(b, `,"data":[`...)
		for k, id := range page {
			if k > 0 {
				b = append(b, ',')
			}
			g := sv.guidOf(id)
			b = append(b, `{"response_id":"`...)
			b = appendGUID(b, g, c.enc.upper)
			b = append(b, `","href":"`...)
			b = append(b, prefix...)
			b = appendGUID(b, g, c.enc.upper)
			b = append(b, `"}`...)
		}
		return append(b, "]}"...)
	})
	s.mu.RUnlock()
	c.write(http.StatusOK, *bp)
	putBuf(bp)
}

// hostileList applies the hostile list faults (issue 19) to a page of ids
// of the list all, and its total.
func (c *call) hostileList(all, page []int32, total, pageNo, perPage int) ([]int32, int) {
	l := c.eff.list
	if l == 0 {
		return page, total
	}
	if l&listRepeat != 0 && len(page) > 0 {
		full := make([]int32, perPage)
		for k := range full {
			full[k] = page[k%len(page)]
		}
		page, total = full, hostileTotal
	}
	if l&listEndless != 0 && len(all) > 0 {
		full := make([]int32, perPage)
		full[0] = all[(pageNo-1)%len(all)]
		for k := 1; k < perPage; k++ {
			full[k] = all[0]
		}
		page, total = full, (pageNo+1)*perPage
	}
	if l&listImplausible != 0 {
		total = hostileTotal
	}
	if l&listUnstable != 0 {
		total += int(c.s.faults.unstable.Add(1))
	}
	return page, total
}

// parseListQuery reads the list filters; a non-empty message is a 400.
func parseListQuery(r *http.Request) (listQuery, string) {
	q := listQuery{status: stCompleted, page: 1, perPage: 50}
	v := r.URL.Query()
	if s := v.Get("page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return q, "Invalid parameter page: must be an integer >= 1"
		}
		q.page = n
	}
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return q, "Invalid parameter per_page: must be an integer from 1 to 1000"
		}
		q.perPage = n
	}
	if s := v.Get("status"); s != "" {
		st := statusCode(s)
		if st > stPartial {
			return q, "Invalid parameter status: must be one of completed, disqualified, quotafull, partial"
		}
		q.status = st
	}
	dates := []struct {
		name string
		t    *int64
		has  *bool
	}{
		{"start_started_at", &q.startStarted, &q.hasSS},
		{"end_started_at", &q.endStarted, &q.hasES},
		{"start_completed_at", &q.startCompleted, &q.hasSC},
		{"end_completed_at", &q.endComplete, &q.hasEC},
	}
	for _, d := range dates {
		s := v.Get(d.name)
		if s == "" {
			continue
		}
		t, err := parseQueryTime(s)
		if err != nil {
			return q, "Invalid parameter " + d.name + ": must be a date like 2022-09-12T16:24:09Z"
		}
		*d.t, *d.has = t.UnixNano(), true
	}
	if q.status == stPartial { // not applicable to partial responses (docs/api.md §4.3)
		q.hasSC, q.hasEC = false, false
	}
	return q, ""
}

func parseQueryTime(s string) (time.Time, error) {
	if len(s) == len("2006-01-02") {
		return time.ParseInLocation("2006-01-02", s, time.UTC)
	}
	if len(s) == len("2006-01-02 15:04:05") && s[10] == ' ' {
		return time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
	}
	return survey.ParseTime(s)
}
