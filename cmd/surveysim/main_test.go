package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--token", "tok", "--surveys", "2", "--responses", "500", "--files"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(line)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/v1") {
		t.Fatalf("base URL %q", base)
	}
	go io.Copy(io.Discard, pr)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequest("GET", base+"/surveys/4575/responses?per_page=5", nil)
	req.Header.Set("X-API-TOKEN", "tok")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Result struct {
			Total int `json:"total"`
		} `json:"result"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body.Result.Total < 300 {
		t.Fatalf("status %d, total %d", resp.StatusCode, body.Result.Total)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
}

func TestBadFlags(t *testing.T) {
	if err := run(context.Background(), []string{"--future", "2"}, io.Discard, io.Discard); err == nil {
		t.Fatal("--future 2 accepted")
	}
	if err := run(context.Background(), []string{"--nope"}, io.Discard, io.Discard); err == nil {
		t.Fatal("unknown flag accepted")
	}
}
