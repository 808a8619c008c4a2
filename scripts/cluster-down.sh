#!/usr/bin/env bash
# Stop the cluster started by scripts/cluster-up.sh DIR: its four
# clickhouse-server nodes, then its ZooKeeper, each by its pid file (a process
# is signalled only when its command line names DIR, so no other ClickHouse
# on the machine is touched) and, with --purge, delete DIR.
#
#   scripts/cluster-down.sh [DIR] [--purge]     DIR defaults to $CLUSTER_DIR or /tmp/surveysync-cluster
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=cluster-lib.sh
. "$here/cluster-lib.sh"

CLUSTER_DIR="${CLUSTER_DIR:-/tmp/surveysync-cluster}"
purge=0
for arg in "$@"; do
	case "$arg" in
	--purge) purge=1 ;;
	*) CLUSTER_DIR="$arg" ;;
	esac
done

if [[ -d "$CLUSTER_DIR" ]]; then
	CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"
	stopped=0
	pids=()
	for ((n = 1; n <= CLUSTER_NODES; n++)); do
		if pid="$(node_pid "$n")"; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("node$n:$pid")
		fi
	done
	# The nodes stop in parallel; wait for each.
	for np in "${pids[@]}"; do
		stop_pid "${np%%:*}" "${np#*:}" TERM
		rm -f "$CLUSTER_DIR/n${np:4:1}/clickhouse.pid"
		stopped=$((stopped + 1))
	done
	if pid="$(zookeeper_pid)"; then
		stop_pid zookeeper "$pid" TERM
		rm -f "$CLUSTER_DIR/zookeeper/zookeeper.pid"
		stopped=$((stopped + 1))
	fi
	if ((stopped == 0)); then
		echo "cluster-down: nothing of $CLUSTER_DIR was running" >&2
	fi
else
	echo "cluster-down: no directory $CLUSTER_DIR, nothing to stop" >&2
fi
if ((purge)); then
	rm -rf "$CLUSTER_DIR"
fi
