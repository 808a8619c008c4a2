#!/usr/bin/env bash
# The client-vs-emulator benchmark with the emulator in its own process, as
# it is deployed (cmd/surveysim) and as the real service is: on its own
# CPU. The emulator gets core 0 (GOMAXPROCS=1), the callers core 1
# (GOMAXPROCS=1), so neither's CPU is taken from the other: the emulator's
# ceiling is what it serves to a trivial caller, and the client's rate
# shows whether the client keeps up with it. Needs taskset (util-linux) and
# at least two cores.
#
#   bench/clientbench/twoproc.sh            # 9 rounds of 1 s at 16, 64, 256
#   SURVEYSYNC_BENCH_ROUNDS=5 SURVEYSYNC_BENCH_CONC=16 bench/clientbench/twoproc.sh
#
# The table goes to stdout (and to $SURVEYSYNC_BENCH_OUT when set). In it,
# "per CPU-s" is the callers' process alone.
set -euo pipefail

cd "$(dirname "$0")/../.."
if [[ "$(nproc)" -lt 2 ]] || ! command -v taskset >/dev/null; then
	echo "twoproc.sh: needs two cores and taskset" >&2
	exit 2
fi
tmp="$(mktemp -d /tmp/clientbench.XXXXXX)"
sim_pid=""
cleanup() {
	[[ -n "$sim_pid" ]] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/surveysim" ./cmd/surveysim
go test -c -o "$tmp/clientbench.test" ./bench/clientbench

port="${SURVEYSYNC_BENCH_PORT:-18089}"
taskset -c 0 env GOMAXPROCS=1 "$tmp/surveysim" --listen "127.0.0.1:$port" --token bench-token \
	--surveys 1 --responses 100000 >"$tmp/sim.log" 2>&1 &
sim_pid=$!
for _ in $(seq 100); do
	grep -q serving "$tmp/sim.log" 2>/dev/null && break
	sleep 0.1
done
grep -q serving "$tmp/sim.log" || { cat "$tmp/sim.log" >&2; exit 1; }

cd bench/clientbench
taskset -c 1 env GOMAXPROCS=1 SURVEYSYNC_BENCH_CLIENT=1 SURVEYSYNC_BENCH_EMULATOR="127.0.0.1:$port" \
	"$tmp/clientbench.test" -test.run '^TestClientVsEmulator$' -test.v -test.timeout 20m |
	sed -n 's/^        //p' | grep -E '^(GOMAXPROCS|\||client /|emulator|rounds)'
