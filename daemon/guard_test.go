package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/dirlock"
	"github.com/surveysync/surveysync/internal/testkit/chtest"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// The single-instance guard (guard.go) at its own level: the Parquet
// folder's lock, and the leases in a real ClickHouse database.

// A second daemon on one Parquet folder is refused, naming the holder;
// Holders sees the lock while it is held and not after. With ClickHouse
// or ha the folder is not locked.
func TestDataDirLock(t *testing.T) {
	cfg := config.Default()
	cfg.Parquet.Dir = filepath.Join(t.TempDir(), "data")
	log := slog.New(slog.DiscardHandler)
	first, err := lockDataDir(cfg, log)
	if err != nil || first == nil {
		t.Fatalf("first lock: %v", err)
	}
	_, err = lockDataDir(cfg, log)
	var held *dirlock.HeldError
	if !errors.As(err, &held) || !strings.HasPrefix(err.Error(), "parquet.dir ") || !strings.Contains(err.Error(), "stop that one first") ||
		held.Holder.PID != os.Getpid() {
		t.Fatalf("second lock: %v, want parquet.dir's holder (pid %d) and the fix", err, os.Getpid())
	}
	wh := openParquet(t, cfg.Parquet.Dir)
	defer wh.Close()
	holders, known := Holders(context.Background(), cfg, wh)
	if !known || len(holders) != 1 || !strings.Contains(holders[0], "holds the lock on parquet.dir") {
		t.Fatalf("holders while locked: %v (known %v)", holders, known)
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	if holders, known := Holders(context.Background(), cfg, wh); !known || len(holders) != 0 {
		t.Fatalf("holders after the unlock: %v (known %v)", holders, known)
	}

	for name, change := range map[string]func(*config.Config){
		"clickhouse": func(c *config.Config) { c.ClickHouse.Addr = []string{"127.0.0.1:9000"} },
		"ha":         func(c *config.Config) { c.HA.Servers = []string{"127.0.0.1:2281"} },
	} {
		c := *cfg
		change(&c)
		if l, err := lockDataDir(&c, log); l != nil || err != nil {
			t.Errorf("with %s the folder is locked (%v, %v)", name, l, err)
		}
	}
	ha := *cfg
	ha.HA.Servers = []string{"127.0.0.1:2281"}
	if _, known := Holders(context.Background(), &ha, wh); known {
		t.Error("with ha the guard claims to know the holders")
	}
}

// openLeaseDB opens a fresh ClickHouse database (dropped after the test),
// or skips without SURVEYSYNC_TEST_CLICKHOUSE_ADDR.
func openLeaseDB(t *testing.T) *clickhouse.Sink {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	o, ok := chtest.Options("test_daemon_guard_" + hex.EncodeToString(b[:]))
	if !ok {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := clickhouse.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := chtest.DropDatabase(ctx, s); err != nil {
			t.Errorf("drop %s: %v", s.Database(), err)
		}
		s.Close()
	})
	return s
}

// deadPID is the pid of a process of this host that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// A live lease of another host refuses the start, naming it and the
// ways out; --force starts anyway (logged, counted once the heartbeat
// sees it); a lease of this host whose process is gone is free; a
// stopped daemon releases its lease.
func TestLeaseGuard(t *testing.T) {
	s := openLeaseDB(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.ClickHouse.Addr = []string{"set"}
	var wh warehouse.Warehouse = s
	host, _ := os.Hostname()
	other := warehouse.Lease{ID: "other", Host: "db-worker-2", PID: 4242, Started: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC), Version: "v1"}
	if err := wh.Leases().Renew(ctx, other); err != nil {
		t.Fatal(err)
	}

	_, err := takeLease(ctx, cfg, wh, false, "test", slog.New(slog.DiscardHandler), nil)
	var lh *LeaseHeldError
	if !errors.As(err, &lh) || len(lh.Others) != 1 {
		t.Fatalf("start beside a live lease: %v", err)
	}
	for _, want := range []string{"host db-worker-2, pid 4242, started 2026-11-28T08:00:00Z", "--force", "configure ha", "expires 30s after a crash"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	holders, known := Holders(ctx, cfg, wh)
	if !known || len(holders) != 1 || !strings.Contains(holders[0], "host db-worker-2, pid 4242") {
		t.Fatalf("holders: %v (known %v)", holders, known)
	}

	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	forced, err := takeLease(ctx, cfg, wh, true, "test", slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatalf("--force: %v", err)
	}
	if !strings.Contains(logs.String(), "--force: starting although another daemon holds a live lease") || !strings.Contains(logs.String(), "db-worker-2") {
		t.Fatalf("--force logged %q", logs.String())
	}
	if n := testutil.ToFloat64(forced.others); n != 0 {
		t.Fatalf("surveysync_instance_others = %v before the first heartbeat", n)
	}
	stop := forced.start(ctx)
	stop() // releases
	if holders, _ := Holders(ctx, cfg, wh); len(holders) != 1 {
		t.Fatalf("holders after the forced daemon stopped: %v, want only db-worker-2", holders)
	}
	if err := wh.Leases().Release(ctx, other); err != nil {
		t.Fatal(err)
	}

	// A crashed daemon of this host (its pid gone) leaves a live lease
	// that does not hold the next start.
	crashed := warehouse.Lease{ID: "crashed", Host: host, PID: deadPID(t), Started: time.Now().UTC().Truncate(time.Second), Version: "v1"}
	if err := wh.Leases().Renew(ctx, crashed); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	l, err := takeLease(ctx, cfg, wh, false, "test", slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatalf("start beside a crashed daemon's lease of this host: %v", err)
	}
	if !strings.Contains(logs.String(), "the lease of a daemon of this host that is gone is free") {
		t.Fatalf("the crashed daemon's lease was not logged as free: %q", logs.String())
	}
	live, err := wh.Leases().Live(ctx, LeaseExpiry)
	if err != nil {
		t.Fatal(err)
	}
	mine := 0
	for _, o := range live {
		if o.ID == l.me.ID {
			mine++
		}
	}
	if mine != 1 {
		t.Fatalf("this daemon's lease not live: %+v", live)
	}
	l.start(ctx)()
}

// processAlive: this process is, an exited one and no pid are not.
func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) || processAlive(deadPID(t)) || processAlive(0) || processAlive(-1) {
		t.Fatal("processAlive is wrong about this process, an exited one or no pid")
	}
}
