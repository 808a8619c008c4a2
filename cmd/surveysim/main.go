// Command surveysim serves the Click4Survey v1 API emulator (sim) on
// its own: the demo and manual testing run surveysync against it.
//
//	surveysim --listen 127.0.0.1:8089 --token sim-token --surveys 3 --responses 10000 --files
//
// It prints the base URL (ending in /v1) on the first line of stdout, then
// serves until SIGINT or SIGTERM. The control API is under /_sim/ (see
// docs/emulator.md); it needs no token, so keep the listener on loopback.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/surveysync/surveysync/sim"
)

var surveyNames = []string{
	"Spokojenost zákazníků – jaro",
	"Průzkum zaměstnanců 2026",
	"Hodnocení školení „Bezpečnost práce“",
	"Zpětná vazba k doručení zásilky",
	"Anketa: Jak se vám líbí nový web?",
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "surveysim:", err)
		stop()
		os.Exit(1)
	}
}

// run serves until ctx is done (SIGINT or SIGTERM in main).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("surveysim", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on (port 0 picks a free one)")
	token := fs.String("token", envOr("SURVEYSIM_TOKEN", "sim-token"), "accepted X-API-TOKEN (env SURVEYSIM_TOKEN)")
	surveys := fs.Int("surveys", 3, "number of generated surveys")
	firstID := fs.Int64("first-survey-id", 4574, "id of the first survey; the others follow")
	responses := fs.Int("responses", 10000, "generated responses per survey")
	interval := fs.Duration("interval", time.Minute, "mean time between two responses' date_created")
	future := fs.Float64("future", 0, "fraction of the responses still to arrive after start (0..1): they appear as the clock runs")
	seed := fs.Int64("seed", 1, "seed of the generated data")
	files := fs.Bool("files", false, "add an upload question with generated files")
	fileSize := fs.Int("file-size", 64<<10, "bytes per generated file")
	webhookURL := fs.String("webhook-url", "", "URL to POST webhooks to (empty: none)")
	live := fs.Bool("live-webhooks", false, "also send response_received for generated responses as they complete")
	verbose := fs.Bool("verbose", false, "log webhook attempts")
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: surveysim [flags]\n\nServe an emulator of the survey service's v1 API (generated surveys and responses) for demos and tests.\nIt prints its base URL on the first line of stdout; the control API is under /_sim/ (docs/emulator.md).\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w (surveysim --help lists the flags)", err)
	}
	if *future < 0 || *future > 1 {
		return fmt.Errorf("--future %v: want 0..1", *future)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	now := time.Now()
	specs := make([]sim.SurveySpec, *surveys)
	for k := range specs {
		start := now.Add(-time.Duration(float64(*responses)*(1-*future)) * *interval)
		specs[k] = sim.SurveySpec{
			ID: *firstID + int64(k), Name: surveyNames[k%len(surveyNames)], Responses: *responses,
			Seed: *seed + int64(k), Start: start, Interval: *interval, Files: *files, FileSize: *fileSize,
		}
	}
	s, err := sim.New(sim.Options{
		Token: *token, Surveys: specs, Seed: *seed, WebhookURL: *webhookURL, WebhookLive: *live, Logger: log,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "http://%s/v1\n", ln.Addr())
	for _, sp := range specs {
		log.Info("survey", "id", sp.ID, "name", sp.Name, "responses", sp.Responses,
			"email_distribution", sim.DistributionID(sp.ID, "email"), "cati_distribution", sim.DistributionID(sp.ID, "cati"))
	}
	log.Info("serving", "base_url", fmt.Sprintf("http://%s/v1", ln.Addr()), "control", fmt.Sprintf("http://%s/_sim/", ln.Addr()))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
