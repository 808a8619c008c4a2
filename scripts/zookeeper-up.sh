#!/usr/bin/env bash
# Start a throw-away standalone ZooKeeper on loopback (Debian's zookeeper
# package, run directly with java, as scripts/cluster-up.sh does), for the
# HA tests and for trying HA by hand. All its files live under DIR.
#
#   scripts/zookeeper-up.sh DIR [PORT]     PORT defaults to $ZOOKEEPER_PORT or 2281
#
# Waits until it serves requests, then prints on stdout
#   export SURVEYSYNC_TEST_ZOOKEEPER=127.0.0.1:PORT
# (eval it). Running it again while it runs prints the same and does
# nothing else. tickTime is 500 ms, so sessions of 1 s to 10 s are granted
# as asked (ZooKeeper bounds them to 2 to 20 ticks). Stop it with
# scripts/zookeeper-down.sh DIR.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=cluster-lib.sh
. "$here/cluster-lib.sh"

if [[ $# -lt 1 ]]; then
	echo "usage: $0 DIR [PORT]" >&2
	exit 2
fi
mkdir -p "$1/data"
dir="$(cd "$1" && pwd)"
port="${2:-${ZOOKEEPER_PORT:-2281}}"
CLUSTER_ZK_PORT="$port" # for ping_zookeeper
zk_jar=/usr/share/java/zookeeper.jar
if [[ ! -f "$zk_jar" ]] || ! command -v java >/dev/null; then
	echo "zookeeper-up: $zk_jar or java not found (apt-get install -y zookeeper)" >&2
	exit 1
fi
zk_pid() { our_pid "$dir/zookeeper.pid" "$dir/zoo.cfg"; }

if zk_pid >/dev/null; then
	:
elif ping_zookeeper; then
	echo "zookeeper-up: something else answers on 127.0.0.1:$port (not started from $dir); choose another PORT" >&2
	exit 1
else
	cat >"$dir/zoo.cfg" <<CFG
# Standalone ZooKeeper for surveysync's HA tests (scripts/zookeeper-up.sh).
tickTime=500
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,stat,cons
CFG
	rm -f "$dir/zookeeper.pid"
	setsid bash -c 'echo $$ >"$1/zookeeper.pid"; exec java -Xms16m -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
		-Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$1/zoo.cfg"' _ "$dir" \
		</dev/null >>"$dir/zookeeper.log" 2>&1 &
fi
ok=0
for ((i = 0; i < ${ZOOKEEPER_WAIT_SECONDS:-60} * 4; i++)); do
	if ping_zookeeper; then
		ok=1
		break
	fi
	if ! zk_pid >/dev/null && ((i > 8)); then
		break
	fi
	sleep 0.25
done
if ((!ok)); then
	echo "zookeeper-up: ZooKeeper does not serve on 127.0.0.1:$port; last lines of $dir/zookeeper.log:" >&2
	tail -n 30 "$dir/zookeeper.log" >&2 || true
	exit 1
fi
echo "export SURVEYSYNC_TEST_ZOOKEEPER=127.0.0.1:$port"
