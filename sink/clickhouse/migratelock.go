package clickhouse

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"
)

// The migrations lock (docs/operations.md, "Migrations on a cluster"): the
// daemons starting on one database apply its migrations one at a time, so
// that concurrent first starts on a replicated ClickHouse 18.x cluster
// never queue the same ALTER … ON CLUSTER twice (its DDLWorker can die of
// that). The lock is a claim in the table migration_lock, created by the
// bootstrap (replicated to every node on a replicated cluster, as
// schema_migrations is): a daemon writes its claim, waits
// migrationLockSettle on a replicated cluster for the claims written at the
// same moment through other nodes to reach the node it reads, and holds the
// lock when its claim is the only live one. A daemon that sees another
// live claim withdraws its own and tries again later (with the start-up's
// jittered back-off), so of two that claimed at the same moment both step
// back and the first to come back wins; a daemon that claims after a
// holder read the claims sees the holder's. A holder renews its claim
// every migrationLockHeartbeat; a claim not renewed for migrationLockExpiry
// (a daemon killed while migrating) no longer counts. Times are the
// server's now(), so the daemons' clocks do not matter.
//
// It is a lock of the warehouse and not of ZooKeeper because every
// daemon has a warehouse and not every one has ha.servers, and because the
// database is what the migrations change. Its one weakness: a claim that
// takes longer than migrationLockSettle to replicate to the node another
// daemon reads can let both hold it; the migrations then run twice, which
// is what happened without a lock (harmless but for the 18.x race).
const (
	migrationLockSettle    = time.Second
	migrationLockHeartbeat = 3 * time.Second
	migrationLockExpiry    = 15 * time.Second
)

// MigrationsBusyError is Open's error while another daemon holds the
// migrations lock of the database: the migrations are being applied
// (the caller tries again later: docs/operations.md, "Start-up").
type MigrationsBusyError struct {
	Database string
	Host     string
	PID      int
	Since    time.Duration // how long it has held the claim
}

func (e *MigrationsBusyError) Error() string {
	return fmt.Sprintf("clickhouse: the migrations of %s are being applied by another surveysync (host %s, pid %d, for %s); "+
		"this one waits for them", e.Database, e.Host, e.PID, e.Since.Round(time.Second))
}

// Fix is what an operator may do.
func (e *MigrationsBusyError) Fix() string {
	return fmt.Sprintf("nothing: the daemon starts once the migrations are applied; if that surveysync is gone, its claim in %s.migration_lock expires %s after its last heartbeat",
		e.Database, migrationLockExpiry)
}

// migrationLock is a held claim; release ends it.
type migrationLock struct {
	s      *Sink
	holder string
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// migrationLockTable is the lock's table in database db.
func migrationLockTable(db string) string { return db + ".migration_lock" }

// lockMigrations claims the lock once: held (the lock, to release), or
// another live claim is older (*MigrationsBusyError).
func (s *Sink) lockMigrations(ctx context.Context) (*migrationLock, error) {
	if busy, err := s.migrationLockBusy(ctx, ""); err != nil || busy != nil {
		if err != nil {
			return nil, err
		}
		return nil, busy
	}
	holder := randomHolder()
	if err := s.writeClaim(ctx, holder, false); err != nil {
		return nil, err
	}
	if s.tmpl.Replicated && s.tmpl.Cluster != "" {
		select {
		case <-ctx.Done():
			s.releaseClaim(ctx, holder)
			return nil, ctx.Err()
		case <-time.After(migrationLockSettle):
		}
	}
	busy, err := s.migrationLockBusy(ctx, holder)
	if err == nil && busy == nil {
		hctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		l := &migrationLock{s: s, holder: holder, stop: stop}
		l.wg.Add(1)
		go l.heartbeat(hctx)
		return l, nil
	}
	// Step back: another daemon holds the lock or claimed it at the same
	// moment.
	s.releaseClaim(ctx, holder)
	if err != nil {
		return nil, err
	}
	return nil, busy
}

// migrationLockBusy reads the live claims: nil when there is none but
// holder's (holder "": none at all), else the oldest other one.
func (s *Sink) migrationLockBusy(ctx context.Context, holder string) (*MigrationsBusyError, error) {
	table := migrationLockTable(s.opts.Database)
	rows, err := s.conn.Query(ctx, `SELECT holder, any(host), any(pid), toInt64(now()) - toInt64(min(heartbeat_at)) AS held
FROM `+table+`
GROUP BY holder
HAVING max(released) = 0 AND toInt64(now()) - toInt64(max(heartbeat_at)) < ?
ORDER BY min(heartbeat_at), holder`, int64(migrationLockExpiry/time.Second))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read the migrations lock %s: %w", table, err)
	}
	defer rows.Close()
	var (
		busy *MigrationsBusyError
		mine bool
	)
	for rows.Next() {
		var (
			h, host string
			pid     uint32
			held    int64
		)
		if err := rows.Scan(&h, &host, &pid, &held); err != nil {
			return nil, fmt.Errorf("clickhouse: read the migrations lock %s: %w", table, err)
		}
		switch {
		case h == holder:
			mine = true
		case busy == nil:
			busy = &MigrationsBusyError{Database: s.opts.Database, Host: host, PID: int(pid), Since: time.Duration(max(held, 0)) * time.Second}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read the migrations lock %s: %w", table, err)
	}
	if busy == nil && holder != "" && !mine {
		return nil, fmt.Errorf("clickhouse: the migrations lock %s: this daemon's claim is not there (written through another node that has not replicated it?)", table)
	}
	return busy, nil
}

// writeClaim writes a row of holder's claim, stamped with the server's
// time (an INSERT … SELECT: ClickHouse 18 waits for a data block that
// Exec of INSERT … VALUES never sends).
func (s *Sink) writeClaim(ctx context.Context, holder string, released bool) error {
	host, _ := os.Hostname()
	rel := uint8(0)
	if released {
		rel = 1
	}
	table := migrationLockTable(s.opts.Database)
	err := s.conn.Exec(ctx, "INSERT INTO "+table+" (holder, host, pid, heartbeat_at, released) SELECT ?, ?, toUInt32(?), now(), toUInt8(?)",
		holder, host, uint32(os.Getpid()), rel)
	if err != nil {
		return fmt.Errorf("clickhouse: write the migrations lock %s: %w", table, err)
	}
	return nil
}

// releaseClaim ends holder's claim; a failure leaves it to expire.
func (s *Sink) releaseClaim(ctx context.Context, holder string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.writeClaim(ctx, holder, true); err != nil {
		s.log.Warn("migrations lock not released; it expires by itself", "expires_in", migrationLockExpiry, "err", err)
	}
}

func (l *migrationLock) heartbeat(ctx context.Context) {
	defer l.wg.Done()
	t := time.NewTicker(migrationLockHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.s.writeClaim(ctx, l.holder, false); err != nil && ctx.Err() == nil {
				l.s.log.Warn("migrations lock: heartbeat failed", "err", err)
			}
		}
	}
}

// release stops the heartbeat and ends the claim.
func (l *migrationLock) release(ctx context.Context) {
	l.stop()
	l.wg.Wait()
	l.s.releaseClaim(ctx, l.holder)
}

func randomHolder() string {
	b := make([]byte, 8)
	if _, err := crand.Read(b); err != nil {
		return fmt.Sprintf("%016x", rand.Uint64())
	}
	return hex.EncodeToString(b)
}
