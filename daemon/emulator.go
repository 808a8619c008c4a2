package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sim"
)

// startEmulator runs the built-in emulator on loopback and points the API
// configuration at it.
func startEmulator(ctx context.Context, g *errgroup.Group, cfg *config.Config, log *slog.Logger) (*sim.Sim, error) {
	e := cfg.Demo.Emulator
	specs := make([]sim.SurveySpec, e.Surveys)
	ids := make([]int64, e.Surveys)
	for i := range specs {
		id := int64(4574 + i)
		specs[i] = sim.SurveySpec{ID: id, Responses: e.ResponsesPerSurvey, Seed: e.Seed + int64(i), Files: cfg.Files.Enabled}
		ids[i] = id
	}
	token := fmt.Sprintf("demo-%d", time.Now().UnixNano())
	so := sim.Options{Token: token, Surveys: specs, Logger: log.With("component", "emulator")}
	if cfg.Webhooks.Enabled {
		// Like the service, the emulator posts webhooks to the daemon,
		// including response_received for responses completing from now on.
		so.WebhookURL = "http://" + cfg.Webhooks.Listen + cfg.Webhooks.Path.Value()
		so.WebhookLive = true
		// With a Standard Webhooks secret the receiver requires signatures:
		// the emulator signs as a relay in front of the service would.
		so.WebhookSecret = cfg.Webhooks.StandardWebhooksSecret.Value()
	}
	s, err := sim.New(so)
	if err != nil {
		return nil, fmt.Errorf("start emulator: %w", err)
	}
	ln, err := net.Listen("tcp", e.Listen)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("start emulator: listen on demo.emulator.listen %s: %w", e.Listen, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveUntil(ctx, g, srv, ln, "emulator", s.Close)
	cfg.API.BaseURL = config.URL("http://" + ln.Addr().String() + "/v1")
	cfg.API.Token = config.Secret(token)
	cfg.API.RateLimit = 0 // the emulator is local: no reason to throttle the demo
	if cfg.API.UserAgent == "" {
		cfg.API.UserAgent = config.DemoUserAgent
	}
	if len(cfg.Surveys) == 0 {
		cfg.Surveys = ids
	}
	log.Info("built-in emulator of the survey service started", "base_url", string(cfg.API.BaseURL),
		"surveys", e.Surveys, "responses_per_survey", e.ResponsesPerSurvey)
	return s, nil
}
