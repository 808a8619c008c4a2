package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/webhookrx"
)

// With webhooks.standard_webhooks_secret set, the demo's emulator signs
// its webhooks with it, so the receiver (which then requires signatures)
// accepts them: here a survey_launched, checked against webhookrx.Sign.
func TestDemoEmulatorSignsWithTheSecret(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan http.Header, 1)
	bodies := make(chan []byte, 1)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- r.Header.Clone():
			bodies <- b
		default:
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	cfg := config.Default()
	cfg.Demo.Emulator.Surveys, cfg.Demo.Emulator.ResponsesPerSurvey = 1, 1
	cfg.Webhooks.Enabled = true
	cfg.Webhooks.Listen = ln.Addr().String()
	cfg.Webhooks.Path = "/hooks/demo-0123456789abcdef"
	cfg.Webhooks.StandardWebhooksSecret = secret
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	s, err := startEmulator(gctx, g, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = g.Wait() }()
	if err := s.LaunchSurvey(4600, "signed"); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		body := <-bodies
		sec, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
		if err != nil {
			t.Fatalf("webhook-timestamp %q: %v", h.Get("webhook-timestamp"), err)
		}
		ts := time.Unix(sec, 0)
		want, err := webhookrx.Sign(secret, h.Get("webhook-id"), ts, body)
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("webhook-id") == "" || h.Get("webhook-signature") != want {
			t.Errorf("webhook headers %v, want signature %s", h, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook from the emulator in 10 s")
	}
}
