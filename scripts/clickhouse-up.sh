#!/usr/bin/env bash
# Start a throw-away ClickHouse server (Debian's clickhouse-server) on
# loopback, with all its files under one directory, and wait until it answers
# SELECT 1. Used by `make clickhouse-up` and by .ci/run.
#
#   scripts/clickhouse-up.sh [DIR]        DIR defaults to $CLICKHOUSE_DIR or /tmp/surveysync-clickhouse
#
# Environment: CLICKHOUSE_TCP_PORT (9000), CLICKHOUSE_HTTP_PORT (8123),
# CLICKHOUSE_WAIT_SECONDS (60), CLICKHOUSE_PASSWORD (the default user's;
# empty by default), CLICKHOUSE_LOG_QUERIES (1: every query in
# system.query_log; 0 by default). Prints the native address on success, e.g.
#   export SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000
# The server runs as a daemon; its pid is in DIR/clickhouse.pid, its logs in
# DIR/log/. Stop it with scripts/clickhouse-down.sh DIR. Running it again while
# the server answers does nothing.
set -euo pipefail

dir="${1:-${CLICKHOUSE_DIR:-/tmp/surveysync-clickhouse}}"
tcp_port="${CLICKHOUSE_TCP_PORT:-9000}"
http_port="${CLICKHOUSE_HTTP_PORT:-8123}"
wait_seconds="${CLICKHOUSE_WAIT_SECONDS:-60}"
password="${CLICKHOUSE_PASSWORD:-}"
log_queries="${CLICKHOUSE_LOG_QUERIES:-0}"

server="$(command -v clickhouse-server || true)"
client="$(command -v clickhouse-client || true)"
if [[ -z "$server" || -z "$client" ]]; then
	echo "clickhouse-up: clickhouse-server/clickhouse-client not found (apt-get install -y clickhouse-server clickhouse-client)" >&2
	exit 1
fi

ping_server() {
	"$client" --host 127.0.0.1 --port "$tcp_port" --password "$password" --query 'SELECT 1' >/dev/null 2>&1
}

if ping_server; then
	echo "clickhouse-up: a server already answers on 127.0.0.1:$tcp_port" >&2
	echo "export SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:$tcp_port"
	exit 0
fi

mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
dir="$(cd "$dir" && pwd)"

cat >"$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>$dir/log/clickhouse-server.log</log>
        <errorlog>$dir/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>3</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>$tcp_port</tcp_port>
    <http_port>$http_port</http_port>
    <max_connections>1024</max_connections>
    <keep_alive_timeout>3</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <format_schema_path>$dir/format_schemas/</format_schema_path>
    <users_config>$dir/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <!-- One shard on this server: lets tests create Distributed tables
         without ZooKeeper (ON CLUSTER DDL still needs ZooKeeper). -->
    <remote_servers>
        <surveysync_local>
            <shard>
                <replica>
                    <host>127.0.0.1</host>
                    <port>$tcp_port</port>
                </replica>
            </shard>
        </surveysync_local>
    </remote_servers>
</yandex>
XML

cat >"$dir/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
            <log_queries>$log_queries</log_queries>
        </default>
    </profiles>
    <users>
        <default>
            <password>$password</password>
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

"$server" --config-file="$dir/config.xml" --pid-file="$dir/clickhouse.pid" --daemon

for ((i = 0; i < wait_seconds * 4; i++)); do
	if ping_server; then
		echo "clickhouse-up: server answers on 127.0.0.1:$tcp_port (dir $dir, pid $(cat "$dir/clickhouse.pid" 2>/dev/null || echo '?'))" >&2
		echo "export SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:$tcp_port"
		exit 0
	fi
	sleep 0.25
done
echo "clickhouse-up: server did not answer within ${wait_seconds}s; last log lines:" >&2
tail -n 30 "$dir/log/clickhouse-server.err.log" >&2 || true
exit 1
