#!/usr/bin/env bash
# Stop, kill or start one node of the cluster started by scripts/cluster-up.sh
# DIR, for chaos tests. start reuses the node's config and data and waits until
# it answers SELECT 1 (CLUSTER_WAIT_SECONDS, default 90).
#
#   scripts/cluster-node.sh DIR stop N     SIGTERM, wait until it has exited
#   scripts/cluster-node.sh DIR kill N     SIGKILL, wait until it has exited
#   scripts/cluster-node.sh DIR start N    start it (nothing when it runs), wait until it answers
#
# N is 1..4 (shard 01: nodes 1, 2; shard 02: nodes 3, 4).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=cluster-lib.sh
. "$here/cluster-lib.sh"

usage() {
	echo "usage: $0 DIR stop|kill|start N   (N = 1..$CLUSTER_NODES)" >&2
	exit 2
}
[[ $# -eq 3 ]] || usage
CLUSTER_DIR="$1" action="$2" n="$3"
[[ "$n" =~ ^[1-9]$ ]] && ((n <= CLUSTER_NODES)) || usage
if [[ ! -f "$CLUSTER_DIR/cluster.env" || ! -f "$CLUSTER_DIR/n$n/config.xml" ]]; then
	echo "cluster-node: $CLUSTER_DIR holds no cluster (run scripts/cluster-up.sh $CLUSTER_DIR first)" >&2
	exit 1
fi
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
# shellcheck source=/dev/null
. "$CLUSTER_DIR/cluster.env"
wait_seconds="${CLUSTER_WAIT_SECONDS:-90}"

case "$action" in
stop | kill)
	sig=TERM
	[[ "$action" == kill ]] && sig=KILL
	if pid="$(node_pid "$n")"; then
		stop_pid "node $n" "$pid" "$sig"
	else
		echo "cluster-node: node $n is not running" >&2
	fi
	rm -f "$CLUSTER_DIR/n$n/clickhouse.pid"
	;;
start)
	if ! node_pid "$n" >/dev/null; then
		if ping_node "$n"; then
			echo "cluster-node: something else answers on 127.0.0.1:$(node_tcp_port "$n")" >&2
			exit 1
		fi
		start_node "$n"
	fi
	if ! wait_node "$n" "$wait_seconds"; then
		# A replica SIGKILLed while it fetched a part of a small replicated
		# table (schema_migrations, migration_lock, a checkpoint) can refuse
		# to start: "The local set of parts of table … doesn't look like the
		# set of parts in ZooKeeper" (ClickHouse 18.x counts the just-fetched
		# part as suspicious, and it is all of the table's rows). What an
		# operator does (docs/operations.md): start it once with the
		# force_restore_data flag, which moves the unexpected parts aside and
		# fetches them again from the other replica.
		if node_pid "$n" >/dev/null ||
			! tail -n 50 "$CLUSTER_DIR/n$n/log/clickhouse-server.err.log" 2>/dev/null | grep -q "look like the set of parts in ZooKeeper"; then
			exit 1
		fi
		echo "cluster-node: node $n refused its parts after a kill; starting it with flags/force_restore_data" >&2
		touch "$CLUSTER_DIR/n$n/data/flags/force_restore_data"
		start_node "$n"
		wait_node "$n" "$wait_seconds"
	fi
	echo "cluster-node: node $n answers on 127.0.0.1:$(node_tcp_port "$n") (pid $(cat "$CLUSTER_DIR/n$n/clickhouse.pid" 2>/dev/null || echo '?'))" >&2
	;;
*) usage ;;
esac
