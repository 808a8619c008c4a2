package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// node is one server of the cluster, reached on its own connection (a
// connection to the cluster's addresses would pick any of them).
type node struct {
	addr, shard, replica string
	conn                 driver.Conn
}

// localTables are the storage tables whose rows are counted on each node.
var localTables = []string{"responses_local", "answers_local"}

func openNodes(ctx context.Context, addrs []string) ([]*node, error) {
	var nodes []*node
	for _, a := range addrs {
		c, err := ch.Open(&ch.Options{Addr: []string{a}, ReadTimeout: 15 * time.Minute})
		if err != nil {
			return nil, err
		}
		n := &node{addr: a, conn: c}
		nodes = append(nodes, n)
		for _, m := range []struct {
			name string
			dst  *string
		}{{"shard", &n.shard}, {"replica", &n.replica}} {
			if err := c.QueryRow(ctx, "SELECT substitution FROM system.macros WHERE macro = ?", m.name).Scan(m.dst); err != nil {
				return nil, fmt.Errorf("node %s: macro {%s}: %w", a, m.name, err)
			}
		}
	}
	return nodes, nil
}

// partRows is the number of rows in the active parts of each local table
// on n: what count() returns, read from the parts' metadata (cheap enough to
// poll while the replicas fetch).
func partRows(ctx context.Context, n *node, db string) ([]uint64, error) {
	out := make([]uint64, len(localTables))
	for i, t := range localTables {
		if err := n.conn.QueryRow(ctx, "SELECT toUInt64(sum(rows)) FROM system.parts WHERE database = ? AND table = ? AND active", db, t).Scan(&out[i]); err != nil {
			return nil, fmt.Errorf("node %s: rows of %s: %w", n.addr, t, err)
		}
	}
	return out, nil
}

// peersAgree reports whether every replica holds as many rows of each local
// table as the other replicas of its shard.
func peersAgree(nodes []*node, rows [][]uint64) bool {
	first := map[string][]uint64{}
	for i, n := range nodes {
		f, ok := first[n.shard]
		if !ok {
			first[n.shard] = rows[i]
			continue
		}
		for t := range f {
			if f[t] != rows[i][t] {
				return false
			}
		}
	}
	return true
}

// replicaLag is called as soon as the daemon has exited (after its last
// write). It records each replica's queue at that moment, then runs SYSTEM
// SYNC REPLICA on every node (in parallel) while polling the row counts, and
// returns a report: when the replicas' counts last came to agree with their
// peers' (and stayed so), when the last SYNC REPLICA returned, and the lag,
// the later of the two.
func replicaLag(ctx context.Context, nodes []*node, db string) (string, error) {
	exit := time.Now()
	var b strings.Builder
	b.WriteString("replicas at the daemon's exit:\n")
	for _, n := range nodes {
		rows, err := n.conn.Query(ctx, "SELECT table, queue_size, inserts_in_queue, absolute_delay FROM system.replicas WHERE database = ? ORDER BY table", db)
		if err != nil {
			return "", fmt.Errorf("node %s: system.replicas: %w", n.addr, err)
		}
		var parts []string
		for rows.Next() {
			var table string
			var queue, inserts uint32
			var delay uint64
			if err := rows.Scan(&table, &queue, &inserts, &delay); err != nil {
				rows.Close()
				return "", err
			}
			if table == "responses_local" || table == "answers_local" {
				parts = append(parts, fmt.Sprintf("%s queue %d (%d fetches) delay %ds", table, queue, inserts, delay))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return "", err
		}
		counts, err := partRows(ctx, n, db)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  %s shard %s replica %s: %d responses / %d answers rows; %s\n",
			n.addr, n.shard, n.replica, counts[0], counts[1], strings.Join(parts, ", "))
	}

	type synced struct {
		n   *node
		d   time.Duration
		err error
	}
	done := make(chan synced, len(nodes))
	for _, n := range nodes {
		go func() {
			for _, t := range localTables {
				if err := n.conn.Exec(ctx, "SYSTEM SYNC REPLICA "+db+"."+t); err != nil {
					done <- synced{n, 0, fmt.Errorf("node %s: SYSTEM SYNC REPLICA %s: %w", n.addr, t, err)}
					return
				}
			}
			done <- synced{n, time.Since(exit), nil}
		}()
	}
	pending := len(nodes)
	var syncLast time.Duration
	syncBy := map[string]time.Duration{}
	agreed := time.Duration(-1)
	deadline := exit.Add(15 * time.Minute)
	for {
		for drained := false; !drained; {
			select {
			case s := <-done:
				if s.err != nil {
					return "", s.err
				}
				pending--
				syncBy[s.n.replica] = s.d
				syncLast = max(syncLast, s.d)
			default:
				drained = true
			}
		}
		at := time.Since(exit)
		rows := make([][]uint64, len(nodes))
		for i, n := range nodes {
			r, err := partRows(ctx, n, db)
			if err != nil {
				return "", err
			}
			rows[i] = r
		}
		if peersAgree(nodes, rows) {
			if agreed < 0 {
				agreed = at
			}
		} else {
			agreed = -1
		}
		if pending == 0 && agreed >= 0 {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("replicas did not agree within 15 minutes of the daemon's exit (%d SYNC REPLICA pending)", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var by []string
	for r, d := range syncBy {
		by = append(by, fmt.Sprintf("%s %s", r, d.Round(time.Millisecond)))
	}
	sort.Strings(by)
	fmt.Fprintf(&b, "replica lag after the last write: %s (every replica's counts equal its peer's after %s; SYSTEM SYNC REPLICA returned after %s: %s)\n",
		max(agreed, syncLast).Round(time.Millisecond), agreed.Round(time.Millisecond), syncLast.Round(time.Millisecond), strings.Join(by, ", "))
	return b.String(), nil
}

// rowsPerShard prints count() of the local tables on every node and each
// shard's share, and checks that the shards' answers rows add up to what the
// Distributed table returned (nAns).
func rowsPerShard(ctx context.Context, nodes []*node, db string, nAns uint64) error {
	fmt.Println("rows per node (count() on each node):")
	type shardRows struct{ resp, ans uint64 }
	shards := map[string]shardRows{}
	var order []string
	for _, n := range nodes {
		var r, a uint64
		if err := n.conn.QueryRow(ctx, "SELECT count() FROM "+db+".responses_local").Scan(&r); err != nil {
			return fmt.Errorf("node %s: %w", n.addr, err)
		}
		if err := n.conn.QueryRow(ctx, "SELECT count() FROM "+db+".answers_local").Scan(&a); err != nil {
			return fmt.Errorf("node %s: %w", n.addr, err)
		}
		fmt.Printf("  %s shard %s replica %s: responses_local %d, answers_local %d\n", n.addr, n.shard, n.replica, r, a)
		if s, ok := shards[n.shard]; !ok {
			shards[n.shard] = shardRows{r, a}
			order = append(order, n.shard)
		} else if s.resp != r || s.ans != a {
			fmt.Printf("  MISMATCH: replica %s differs from its peer (%d/%d vs %d/%d)\n", n.replica, r, a, s.resp, s.ans)
		}
	}
	var totR, totA uint64
	for _, s := range order {
		totR += shards[s].resp
		totA += shards[s].ans
	}
	for _, s := range order {
		fmt.Printf("  shard %s: %d responses rows (%.1f %%), %d answers rows (%.1f %%)\n",
			s, shards[s].resp, 100*float64(shards[s].resp)/float64(max(totR, 1)), shards[s].ans, 100*float64(shards[s].ans)/float64(max(totA, 1)))
	}
	if totA != nAns {
		return fmt.Errorf("the shards hold %d answers rows, the Distributed table returned %d", totA, nAns)
	}
	return nil
}
