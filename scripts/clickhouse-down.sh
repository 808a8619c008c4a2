#!/usr/bin/env bash
# Stop the server started by scripts/clickhouse-up.sh DIR (by its pid file)
# and, with --purge, delete DIR.
#
#   scripts/clickhouse-down.sh [DIR] [--purge]
set -euo pipefail

dir="${CLICKHOUSE_DIR:-/tmp/surveysync-clickhouse}"
purge=0
for arg in "$@"; do
	case "$arg" in
	--purge) purge=1 ;;
	*) dir="$arg" ;;
	esac
done

pidfile="$dir/clickhouse.pid"
if [[ -f "$pidfile" ]]; then
	pid="$(cat "$pidfile")"
	if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for ((i = 0; i < 120; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.25
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "clickhouse-down: pid $pid still alive after 30s, sending KILL" >&2
			kill -KILL "$pid" || true
		fi
		echo "clickhouse-down: stopped pid $pid" >&2
	fi
	rm -f "$pidfile"
else
	echo "clickhouse-down: no pid file in $dir, nothing to stop" >&2
fi
if ((purge)); then
	rm -rf "$dir"
fi
