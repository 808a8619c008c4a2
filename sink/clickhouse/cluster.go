package clickhouse

import (
	"context"
	"fmt"
	"strings"
)

// checkCluster verifies, before any DDL, that the server knows the
// configured cluster and that the layout suits it: a cluster whose shards
// have several replicas needs Replicated engines (else each row would be
// on one replica only, and a query served by another would miss it), and
// those need the {shard} and {replica} macros on every node.
func (s *Sink) checkCluster(ctx context.Context) error {
	where := strings.Join(s.opts.Addr, ",")
	rows, err := s.conn.Query(ctx,
		"SELECT shard_num, count() FROM system.clusters WHERE cluster = ? GROUP BY shard_num ORDER BY shard_num", s.opts.Cluster)
	if err != nil {
		return fmt.Errorf("clickhouse: read system.clusters on %s: %w", where, err)
	}
	defer rows.Close()
	shards, maxReplicas := 0, uint64(0)
	for rows.Next() {
		var shard uint32
		var n uint64
		if err := rows.Scan(&shard, &n); err != nil {
			return fmt.Errorf("clickhouse: read system.clusters on %s: %w", where, err)
		}
		shards++
		maxReplicas = max(maxReplicas, n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: read system.clusters on %s: %w", where, err)
	}
	if shards == 0 {
		return fmt.Errorf("clickhouse: cluster %q is not declared on %s (add it to <remote_servers> of every node, or fix clickhouse.cluster)", s.opts.Cluster, where)
	}
	if maxReplicas > 1 && !s.tmpl.Replicated {
		return fmt.Errorf("clickhouse: cluster %q has %d replicas per shard but clickhouse.replicated is false: "+
			"each row would be stored on one replica only (set clickhouse.replicated: true)", s.opts.Cluster, maxReplicas)
	}
	s.log.Info("cluster", "name", s.opts.Cluster, "shards", shards, "replicas_per_shard", maxReplicas, "replicated", s.tmpl.Replicated)
	if maxReplicas > 1 {
		s.checkLoadBalancing(ctx)
	}
	if !s.tmpl.Replicated {
		return nil
	}
	var macros []string
	if err := s.conn.Select(ctx, &macros, "SELECT macro FROM system.macros"); err != nil {
		s.log.Debug("system.macros not readable; macros not checked", "error", err)
		return nil
	}
	have := map[string]bool{}
	for _, m := range macros {
		have[m] = true
	}
	for _, m := range []string{"shard", "replica"} {
		if !have[m] {
			return fmt.Errorf("clickhouse: cluster %q: the node at %s has no {%s} macro (add <macros><shard>…</shard><replica>…</replica></macros> to every node's config; replicated tables need both)", s.opts.Cluster, where, m)
		}
	}
	return nil
}

// checkLoadBalancing warns when the user's load_balancing lets a read
// through a Distributed table go to another replica than the insert before
// it did (random, the server's default): the read may then miss rows the
// other replica has not fetched yet. ClickHouse 18.16 cannot take the
// setting from the driver (only numeric settings travel with a query on
// its protocol), so it belongs in the user's profile.
func (s *Sink) checkLoadBalancing(ctx context.Context) {
	var lb string
	if err := s.conn.QueryRow(ctx, "SELECT value FROM system.settings WHERE name = 'load_balancing'").Scan(&lb); err != nil {
		s.log.Debug("load_balancing not readable", "error", err)
		return
	}
	if lb != "in_order" && lb != "first_or_random" {
		s.log.Warn("load_balancing is not in_order: a read through a Distributed table may be served by a replica that has not fetched the rows just written "+
			"(set <load_balancing>in_order</load_balancing> in the profile of surveysync's ClickHouse user; docs/operations.md)",
			"load_balancing", lb)
	}
}
