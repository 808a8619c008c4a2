#!/usr/bin/env bash
# Stop the ZooKeeper started by scripts/zookeeper-up.sh DIR (by its pid file;
# signalled only when its command line names DIR). With --kill, SIGKILL
# instead of SIGTERM; with --purge, delete DIR afterwards.
#
#   scripts/zookeeper-down.sh DIR [--kill] [--purge]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=cluster-lib.sh
. "$here/cluster-lib.sh"

dir="" sig=TERM purge=0
for arg in "$@"; do
	case "$arg" in
	--kill) sig=KILL ;;
	--purge) purge=1 ;;
	*) dir="$arg" ;;
	esac
done
if [[ -z "$dir" ]]; then
	echo "usage: $0 DIR [--kill] [--purge]" >&2
	exit 2
fi
if [[ -d "$dir" ]]; then
	dir="$(cd "$dir" && pwd)"
	if pid="$(our_pid "$dir/zookeeper.pid" "$dir/zoo.cfg")"; then
		stop_pid zookeeper "$pid" "$sig"
		rm -f "$dir/zookeeper.pid"
	else
		echo "zookeeper-down: nothing of $dir was running" >&2
	fi
fi
if ((purge)); then
	rm -rf "$dir"
fi
