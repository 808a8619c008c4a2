package surveyapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// TestTokenNeverLeaks provokes every error path, with a service that echoes
// the token back in every message it can, and checks that the token appears
// in no error text, no log line and no metric.
func TestTokenNeverLeaks(t *testing.T) {
	// The survey id (GET) or distribution id (POST) selects the misbehaviour.
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("X-API-TOKEN")
		parts := strings.Split(r.URL.Path, "/")
		code, _ := strconv.Atoi(parts[3])
		io.Copy(io.Discard, r.Body)
		switch {
		case code >= 400:
			w.Header().Set("Retry-After", "0")
			writeJSON(w, code, fmt.Sprintf(`{"meta": {"requestId": "rid-%d", "http_status": %d, "errors": [{"error_message": "token %s is not valid here"}]}}`, code, code, tok))
		case code == 1: // timeout
			waitOrDone(r, 5*time.Second)
		case code == 2: // reset
			resetConn(t, w)
		case code == 3: // HTML page with 200
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html>your token " + tok + " expired</html>"))
		case code == 4: // wrong shape
			writeJSON(w, 200, `{"result": ["`+tok+`"], "meta": {"requestId": "`+tok+`"}}`)
		case code == 5: // redirect carrying the token
			http.Redirect(w, r, "http://127.0.0.2:1/login?token="+tok, http.StatusFound)
		case code == 6: // HTML error page
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(500)
			w.Write([]byte("<html>" + tok + "</html>"))
		case code == 7: // stalled download
			w.Write([]byte("partial"))
			http.NewResponseController(w).Flush()
			waitOrDone(r, 5*time.Second)
		}
	})
	h := newClient(t, s.URL, func(o *Options) {
		o.Timeout = 80 * time.Millisecond
		o.MaxRetries = 1
		o.QuotaPause = 20 * time.Millisecond
		o.AuthProbeInterval = time.Hour
	})
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := "http://" + l.Addr().String()
	l.Close()
	hr := newClient(t, refused, nil)

	ctx := context.Background()
	var errs []error
	get := func(id int64) {
		_, err := h.c.GetResponse(ctx, id, testRID)
		errs = append(errs, err)
	}
	post := func(id int64) {
		_, err := h.c.CreateContact(ctx, id, survey.Contact{Email: "a@b.cz"})
		errs = append(errs, err)
		_, err = h.c.SendMessage(ctx, id, 1, survey.SendRequest{})
		errs = append(errs, err)
	}
	for _, code := range []int64{400, 403, 404, 405, 409, 429, 500, 503, 1, 2, 3, 4, 5, 6} {
		get(code)
		_, err := h.c.ListResponses(ctx, code, survey.ListQuery{})
		errs = append(errs, err)
	}
	for _, code := range []int64{400, 405, 429, 500, 1, 2, 3, 4, 5} {
		post(code)
	}
	_, err := h.c.DownloadFile(ctx, 404, testRID, testFID)
	errs = append(errs, err)
	f, err := h.c.DownloadFile(ctx, 7, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(f.Body)
	f.Body.Close()
	errs = append(errs, err)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = h.c.CreateContact(cctx, 1, survey.Contact{})
	cancel()
	errs = append(errs, err)
	_, err = h.c.GetResponse(ctx, 1, "bad id")
	errs = append(errs, err)
	_, err = hr.c.CreateContact(ctx, 1, survey.Contact{})
	errs = append(errs, err)
	get(402) // quota pause
	get(401) // token rejected
	get(401) // fail fast
	errs = append(errs, h.c.Ping(ctx), h.c.LastAuthError())

	var all strings.Builder
	for i, err := range errs {
		if err == nil {
			t.Errorf("call %d succeeded; every call here must fail", i)
			continue
		}
		fmt.Fprintf(&all, "%v\n%+v\n%#v\n%s\n", err, err, err, err.Error())
	}
	all.WriteString(h.logs.String())
	all.WriteString(hr.logs.String())
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		all.WriteString(mf.String())
	}
	st := h.c.Stats()
	fmt.Fprintf(&all, "%+v", st)

	text := all.String()
	if strings.Contains(text, testToken) {
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, testToken) {
				t.Errorf("token leaked: %s", line)
			}
		}
	}
	// The paths were really taken.
	for _, want := range []string{"rid-400", "[redacted]", "request sent but outcome unknown", "no answer within", "redirect to", "API token rejected", "quota", "connection refused", "not JSON", "reading the file"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the collected errors and logs", want)
		}
	}
	if testing.Verbose() {
		t.Logf("collected %d errors, %d bytes of logs", len(errs), len(h.logs.String()))
	}
}
