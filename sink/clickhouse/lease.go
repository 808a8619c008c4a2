package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/sink/warehouse"
)

// The daemons' leases in the instances table (migration 0085): the
// single-instance guard of a database (docs/operations.md, "One daemon per
// database"). Heartbeats are the server's now(), and ages are measured by
// the server too, so the daemons' clocks do not matter.

// Leases is the instances table.
func (s *Sink) Leases() warehouse.Leases { return leases{s} }

type leases struct{ s *Sink }

// Live reads each daemon's latest row, keeping those renewed within
// `within` and not released.
func (l leases) Live(ctx context.Context, within time.Duration) ([]warehouse.Lease, error) {
	table := l.s.table("instances")
	rows, err := l.s.conn.Query(ctx, `SELECT instance_id, argMax(host, _version), argMax(pid, _version),
    argMax(started_at, _version), argMax(version, _version), argMax(heartbeat_at, _version) AS hb,
    toInt64(now()) - toInt64(hb) AS age
FROM `+table+`
GROUP BY instance_id
HAVING toInt64(hb) > 0 AND age < ?
ORDER BY argMax(started_at, _version), instance_id`, int64(within/time.Second))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read the leases in %s: %w", table, err)
	}
	defer rows.Close()
	var out []warehouse.Lease
	for rows.Next() {
		var (
			x   warehouse.Lease
			pid uint32
			hb  time.Time
			age int64
		)
		if err := rows.Scan(&x.ID, &x.Host, &pid, &x.Started, &x.Version, &hb, &age); err != nil {
			return nil, fmt.Errorf("clickhouse: read the leases in %s: %w", table, err)
		}
		x.PID = int(pid)
		x.HeartbeatAge = max(0, time.Duration(age)*time.Second)
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read the leases in %s: %w", table, err)
	}
	return out, nil
}

// Renew writes a version of x's row with the server's time as heartbeat.
func (l leases) Renew(ctx context.Context, x warehouse.Lease) error {
	return l.write(ctx, x, "now()")
}

// Release writes a version of x's row with no heartbeat (1970-01-01).
func (l leases) Release(ctx context.Context, x warehouse.Lease) error {
	return l.write(ctx, x, "toDateTime(0)")
}

func (l leases) write(ctx context.Context, x warehouse.Lease, heartbeat string) error {
	table := l.s.table("instances")
	err := l.s.conn.Exec(l.s.insertCtx(ctx), "INSERT INTO "+table+
		" (instance_id, host, pid, started_at, heartbeat_at, version, _version) SELECT ?, ?, toUInt32(?), toDateTime(?, 'UTC'), "+heartbeat+", ?, toUInt64(?)",
		x.ID, x.Host, uint32(x.PID), x.Started.Unix(), x.Version, l.s.nextVersion())
	if err != nil {
		return fmt.Errorf("clickhouse: write the lease of %s (pid %d) into %s: %w", x.Host, x.PID, table, err)
	}
	return nil
}
