#!/usr/bin/env bash
# Compare two revisions on the 20k load harness (bench/backfill), runs
# alternating in one sitting: the ratio of the emulator's ceiling is noisy
# (±3 points from run to run on a shared 2-core machine), so one run of each
# decides nothing; pairs taken in turn do (docs/benchmarks.md, issue 19).
#
#   scripts/bench-ab.sh BEFORE [AFTER] [-- extra bench/backfill flags]
#
# BEFORE and AFTER are git revisions (AFTER defaults to the work tree as it
# is). Each is checked out in a temporary worktree and its harness built
# there; the harness builds that tree's daemon and emulator itself.
# Environment: PAIRS (3), CLICKHOUSE (127.0.0.1:9000; start one with
# scripts/clickhouse-up.sh). Prints, per run, the ratio of the ceiling, the
# daemon's CPU-seconds per 1,000 responses and its peak RSS, then the means.
# Put ClickHouse's data on a journaled filesystem (docs/benchmarks.md,
# "ClickHouse's filesystem"): the first run prints where its parts are.
set -euo pipefail

before="${1:?usage: scripts/bench-ab.sh BEFORE [AFTER] [-- flags]}"
shift
after=""
if [[ $# -gt 0 && "$1" != "--" ]]; then
	after="$1"
	shift
fi
[[ "${1:-}" == "--" ]] && shift
pairs="${PAIRS:-3}"
addr="${CLICKHOUSE:-127.0.0.1:9000}"
root="$(git rev-parse --show-toplevel)"
tmp="$(mktemp -d)"
cleanup() {
	git -C "$root" worktree remove --force "$tmp/before" >/dev/null 2>&1 || true
	git -C "$root" worktree remove --force "$tmp/after" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$root" worktree add --detach "$tmp/before" "$before" >/dev/null
trees=(before after)
dirs=("$tmp/before" "$root")
if [[ -n "$after" ]]; then
	git -C "$root" worktree add --detach "$tmp/after" "$after" >/dev/null
	dirs[1]="$tmp/after"
fi
for i in 0 1; do
	(cd "${dirs[$i]}" && go build -o "$tmp/backfill-${trees[$i]}" ./bench/backfill)
done

declare -A sum_ratio sum_cpu n
for _ in $(seq 1 "$pairs"); do
	for i in 0 1; do
		t="${trees[$i]}"
		out="$(cd "${dirs[$i]}" && "$tmp/backfill-$t" -clickhouse "$addr" -surveys 2 -responses 10000 \
			-defaults -raw-rows 0 -delay 2ms -ceiling 3s "$@" 2>&1)" || {
			echo "$t: the harness failed:" >&2
			echo "$out" | tail -20 >&2
			exit 1
		}
		ratio="$(echo "$out" | sed -n 's/^ratio: .* = \([0-9.]*\) %$/\1/p')"
		cpu="$(echo "$out" | sed -n 's/^CPU-seconds per 1,000 responses: daemon \([0-9.]*\)$/\1/p')"
		rss="$(echo "$out" | grep -o 'peak RSS [0-9]* MB' | head -1)"
		if [[ -z "${fs_said:-}" ]]; then
			# Once: where ClickHouse's parts are (on ext4 without a
			# journal its kernel time, and the ratio, depend on what the
			# runs before deleted: docs/benchmarks.md).
			echo "$out" | grep "^ClickHouse's parts are on" || true
			fs_said=1
		fi
		echo "$t: ${ratio} % of the ceiling, ${cpu} CPU-s per 1,000 responses, ${rss}"
		sum_ratio[$t]="$(awk -v a="${sum_ratio[$t]:-0}" -v b="$ratio" 'BEGIN { print a + b }')"
		sum_cpu[$t]="$(awk -v a="${sum_cpu[$t]:-0}" -v b="$cpu" 'BEGIN { print a + b }')"
		n[$t]=$((${n[$t]:-0} + 1))
	done
done
for t in before after; do
	awk -v t="$t" -v r="${sum_ratio[$t]}" -v c="${sum_cpu[$t]}" -v n="${n[$t]}" \
		'BEGIN { printf "%s: mean %.1f %% of the ceiling, %.3f CPU-s per 1,000 responses (%d runs)\n", t, r / n, c / n, n }'
done
