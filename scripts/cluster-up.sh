#!/usr/bin/env bash
# Start a throw-away ClickHouse cluster on loopback: one standalone ZooKeeper
# (Debian's zookeeper package, run directly with java) and four
# clickhouse-server processes (Debian's 18.16) forming cluster
# surveysync_cluster = 2 shards x 2 replicas, internal_replication on. All
# files live under one directory. Waits until every node answers SELECT 1 and
# reaches ZooKeeper. Used by `make cluster-up` and by .ci/run.
#
#   scripts/cluster-up.sh [DIR]        DIR defaults to $CLUSTER_DIR or /tmp/surveysync-cluster
#
# Environment (read on the first start, then kept in DIR/cluster.env):
#   CLUSTER_NAME (surveysync_cluster), CLUSTER_ZK_PORT (2181),
#   CLUSTER_TCP_BASE (9100), CLUSTER_HTTP_BASE (8200),
#   CLUSTER_INTERSERVER_BASE (9300): node N (1..4) listens on BASE+N;
#   CLUSTER_WAIT_SECONDS (90).
#
#   node  shard  replica  tcp   http  interserver
#   1     01     n1       9101  8201  9301
#   2     01     n2       9102  8202  9302
#   3     02     n3       9103  8203  9303
#   4     02     n4       9104  8204  9304
#
# Every node has the macros {cluster}, {shard} and {replica}, so
#   ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t_local', '{replica}', v)
# works ON CLUSTER. Prints, on success:
#   export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR=127.0.0.1:9101,...,127.0.0.1:9104
#   export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER=surveysync_cluster
#   export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_DIR=DIR
# Running it again while everything answers does nothing; a node or ZooKeeper
# that is down is started again. Stop it with scripts/cluster-down.sh DIR; one
# node with scripts/cluster-node.sh DIR stop|kill|start N.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=cluster-lib.sh
. "$here/cluster-lib.sh"

CLUSTER_DIR="${1:-${CLUSTER_DIR:-/tmp/surveysync-cluster}}"
wait_seconds="${CLUSTER_WAIT_SECONDS:-90}"

for cmd in clickhouse-server clickhouse-client java; do
	if ! command -v "$cmd" >/dev/null; then
		echo "cluster-up: $cmd not found (apt-get install -y clickhouse-server clickhouse-client zookeeper)" >&2
		exit 1
	fi
done
zk_jar=/usr/share/java/zookeeper.jar
if [[ ! -f "$zk_jar" ]]; then
	echo "cluster-up: $zk_jar not found (apt-get install -y zookeeper)" >&2
	exit 1
fi

mkdir -p "$CLUSTER_DIR"
CLUSTER_DIR="$(cd "$CLUSTER_DIR" && pwd)"

if [[ -f "$CLUSTER_DIR/cluster.env" ]]; then
	# shellcheck source=/dev/null
	. "$CLUSTER_DIR/cluster.env"
else
	CLUSTER_NAME="${CLUSTER_NAME:-surveysync_cluster}"
	CLUSTER_ZK_PORT="${CLUSTER_ZK_PORT:-2181}"
	CLUSTER_TCP_BASE="${CLUSTER_TCP_BASE:-9100}"
	CLUSTER_HTTP_BASE="${CLUSTER_HTTP_BASE:-8200}"
	CLUSTER_INTERSERVER_BASE="${CLUSTER_INTERSERVER_BASE:-9300}"
	cat >"$CLUSTER_DIR/cluster.env" <<ENV
CLUSTER_NAME=$CLUSTER_NAME
CLUSTER_ZK_PORT=$CLUSTER_ZK_PORT
CLUSTER_TCP_BASE=$CLUSTER_TCP_BASE
CLUSTER_HTTP_BASE=$CLUSTER_HTTP_BASE
CLUSTER_INTERSERVER_BASE=$CLUSTER_INTERSERVER_BASE
ENV
fi

addrs=""
for ((n = 1; n <= CLUSTER_NODES; n++)); do
	addrs="${addrs:+$addrs,}127.0.0.1:$(node_tcp_port "$n")"
done

print_exports() {
	echo "export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_ADDR=$addrs"
	echo "export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER=$CLUSTER_NAME"
	echo "export SURVEYSYNC_TEST_CLICKHOUSE_CLUSTER_DIR=$CLUSTER_DIR"
}

# ---- ZooKeeper --------------------------------------------------------------

zk="$CLUSTER_DIR/zookeeper"
zk_started=0
if zookeeper_pid >/dev/null; then
	:
elif ping_zookeeper; then
	echo "cluster-up: something else answers on ZooKeeper's port 127.0.0.1:$CLUSTER_ZK_PORT (not started from $CLUSTER_DIR); set CLUSTER_ZK_PORT or stop it" >&2
	exit 1
else
	mkdir -p "$zk/data"
	cat >"$zk/zoo.cfg" <<CFG
# Standalone ZooKeeper for the surveysync test cluster (scripts/cluster-up.sh).
tickTime=1000
dataDir=$zk/data
clientPort=$CLUSTER_ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=2000
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr,stat
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
CFG
	rm -f "$zk/zookeeper.pid"
	# setsid: its own session, so that the shell that started it can exit.
	# The pid is the java process's (exec).
	setsid bash -c 'echo $$ >"$1/zookeeper.pid"; exec java -Xms32m -Xmx256m -XX:+UseSerialGC \
		-Dorg.slf4j.simpleLogger.showDateTime=true \
		-cp "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$1/zoo.cfg"' _ "$zk" \
		</dev/null >>"$zk/zookeeper.log" 2>&1 &
	zk_started=1
fi
# Until it serves requests (a node that starts before cannot load its
# Replicated tables and exits).
ok=0
for ((i = 0; i < wait_seconds * 4; i++)); do
	if ping_zookeeper; then
		ok=1
		break
	fi
	if ! zookeeper_pid >/dev/null && ((i > 8)); then
		break
	fi
	sleep 0.25
done
if ((!ok)); then
	echo "cluster-up: ZooKeeper does not serve on 127.0.0.1:$CLUSTER_ZK_PORT; last lines of $zk/zookeeper.log:" >&2
	tail -n 30 "$zk/zookeeper.log" >&2 || true
	exit 1
fi
if ((zk_started)); then
	echo "cluster-up: ZooKeeper serves on 127.0.0.1:$CLUSTER_ZK_PORT (pid $(cat "$zk/zookeeper.pid"))" >&2
fi

# ---- ClickHouse nodes -------------------------------------------------------

remote_servers() {
	local s r n
	echo "        <$CLUSTER_NAME>"
	for s in 1 2; do
		echo "            <shard>"
		echo "                <internal_replication>true</internal_replication>"
		for r in 1 2; do
			n=$(((s - 1) * 2 + r))
			echo "                <replica><host>127.0.0.1</host><port>$(node_tcp_port "$n")</port></replica>"
		done
		echo "            </shard>"
	done
	echo "        </$CLUSTER_NAME>"
}

write_node_config() {
	local n="$1" d="$CLUSTER_DIR/n$1"
	mkdir -p "$d"/{data,tmp,user_files,format_schemas,log}
	cat >"$d/config.xml" <<XML
<?xml version="1.0"?>
<!-- Node $n of the surveysync test cluster (scripts/cluster-up.sh). -->
<yandex>
    <logger>
        <level>warning</level>
        <log>$d/log/clickhouse-server.log</log>
        <errorlog>$d/log/clickhouse-server.err.log</errorlog>
        <size>50M</size>
        <count>2</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>$(node_tcp_port "$n")</tcp_port>
    <http_port>$(node_http_port "$n")</http_port>
    <interserver_http_port>$(node_interserver_port "$n")</interserver_http_port>
    <interserver_http_host>127.0.0.1</interserver_http_host>
    <max_connections>256</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>50</max_concurrent_queries>
    <uncompressed_cache_size>33554432</uncompressed_cache_size>
    <mark_cache_size>33554432</mark_cache_size>
    <path>$d/data/</path>
    <tmp_path>$d/tmp/</tmp_path>
    <user_files_path>$d/user_files/</user_files_path>
    <format_schema_path>$d/format_schemas/</format_schema_path>
    <users_config>$d/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <remote_servers>
$(remote_servers)
    </remote_servers>
    <zookeeper>
        <node><host>127.0.0.1</host><port>$CLUSTER_ZK_PORT</port></node>
        <session_timeout_ms>10000</session_timeout_ms>
    </zookeeper>
    <macros>
        <cluster>$CLUSTER_NAME</cluster>
        <shard>$(node_shard "$n")</shard>
        <replica>n$n</replica>
    </macros>
    <distributed_ddl>
        <path>/clickhouse/task_queue/ddl</path>
    </distributed_ddl>
</yandex>
XML
	cat >"$d/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>2000000000</max_memory_usage>
            <load_balancing>in_order</load_balancing>
            <background_pool_size>4</background_pool_size>
            <background_schedule_pool_size>4</background_schedule_pool_size>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
XML
}

started=()
for ((n = 1; n <= CLUSTER_NODES; n++)); do
	if node_pid "$n" >/dev/null; then
		continue
	fi
	if ping_node "$n"; then
		echo "cluster-up: something else answers on node $n's port 127.0.0.1:$(node_tcp_port "$n") (not started from $CLUSTER_DIR); set CLUSTER_TCP_BASE or stop it" >&2
		exit 1
	fi
	write_node_config "$n"
	start_node "$n"
	started+=("$n")
done

failed=0
for ((n = 1; n <= CLUSTER_NODES; n++)); do
	wait_node "$n" "$wait_seconds" || failed=1
done
if ((failed)); then
	exit 1
fi

# Every node reaches ZooKeeper (a node starts before its session is up).
for ((n = 1; n <= CLUSTER_NODES; n++)); do
	ok=0
	for ((i = 0; i < wait_seconds * 2; i++)); do
		if node_query "$n" "SELECT count() FROM system.zookeeper WHERE path = '/'" >/dev/null 2>&1; then
			ok=1
			break
		fi
		sleep 0.5
	done
	if ((!ok)); then
		echo "cluster-up: node $n does not reach ZooKeeper on 127.0.0.1:$CLUSTER_ZK_PORT:" >&2
		node_query "$n" "SELECT count() FROM system.zookeeper WHERE path = '/'" >&2 || true
		grep -v '^[0-9]*\. ' "$CLUSTER_DIR/n$n/log/clickhouse-server.err.log" 2>/dev/null | tail -n 15 >&2 || true
		exit 1
	fi
done

if ((${#started[@]})); then
	echo "cluster-up: $CLUSTER_NAME answers (started nodes ${started[*]}; dir $CLUSTER_DIR)" >&2
else
	echo "cluster-up: $CLUSTER_NAME already answers (dir $CLUSTER_DIR)" >&2
fi
print_exports
