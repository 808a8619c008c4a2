# Shared by scripts/cluster-up.sh, cluster-down.sh and cluster-node.sh
# (sourced, not run). The layout of a test cluster directory DIR:
#
#   DIR/cluster.env            the ports and name chosen by cluster-up.sh (sourced by the others)
#   DIR/zookeeper/             zoo.cfg, data/, zookeeper.log, zookeeper.pid
#   DIR/nN/ (N = 1..4)         config.xml, users.xml, data/, tmp/, log/, clickhouse.pid
#
# Node N listens on 127.0.0.1: tcp CLUSTER_TCP_BASE+N, http CLUSTER_HTTP_BASE+N,
# interserver CLUSTER_INTERSERVER_BASE+N. Nodes 1 and 2 are shard 01, nodes 3
# and 4 shard 02; node N's replica macro is nN.

CLUSTER_NODES=4

cluster_client() {
	command -v clickhouse-client
}

# node_tcp_port N / node_http_port N / node_interserver_port N
node_tcp_port() { echo $((CLUSTER_TCP_BASE + $1)); }
node_http_port() { echo $((CLUSTER_HTTP_BASE + $1)); }
node_interserver_port() { echo $((CLUSTER_INTERSERVER_BASE + $1)); }
node_shard() { printf '%02d' $((($1 + 1) / 2)); }

# node_query N SQL: runs SQL on node N, prints the result.
node_query() {
	clickhouse-client --host 127.0.0.1 --port "$(node_tcp_port "$1")" --connect_timeout 2 --query "$2"
}

ping_node() {
	node_query "$1" 'SELECT 1' >/dev/null 2>&1
}

# ping_zookeeper: ZooKeeper serves requests: its "srvr" answer names its
# mode ("ruok" says imok before a restarted server has loaded its data, and
# a clickhouse-server that starts then fails to load its Replicated tables
# and exits).
ping_zookeeper() {
	local ans
	ans="$(timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$CLUSTER_ZK_PORT" 2>/dev/null || true)"
	[[ "$ans" == *"Mode: "* ]]
}

# our_pid PIDFILE PATTERN: prints the pid in PIDFILE when that process is
# alive and its command line contains PATTERN (a path under DIR), so that a
# stale pid file never makes us signal someone else's process.
our_pid() {
	local pidfile="$1" pattern="$2" pid
	[[ -f "$pidfile" ]] || return 1
	pid="$(cat "$pidfile" 2>/dev/null || true)"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern" || return 1
	echo "$pid"
}

node_pid() { our_pid "$CLUSTER_DIR/n$1/clickhouse.pid" "$CLUSTER_DIR/n$1/config.xml"; }
zookeeper_pid() { our_pid "$CLUSTER_DIR/zookeeper/zookeeper.pid" "$CLUSTER_DIR/zookeeper/zoo.cfg"; }

# start_node N: starts node N's clickhouse-server (a daemon) with its config.
start_node() {
	local n="$1" d="$CLUSTER_DIR/n$1"
	rm -f "$d/clickhouse.pid"
	clickhouse-server --config-file="$d/config.xml" --pid-file="$d/clickhouse.pid" --daemon
}

# wait_node N SECONDS: until node N answers SELECT 1; when it does not
# (or its process has exited) prints the end of its error log.
wait_node() {
	local n="$1" secs="$2" i what
	what="did not answer within ${secs}s"
	for ((i = 0; i < secs * 4; i++)); do
		if ping_node "$n"; then
			return 0
		fi
		# The daemon writes its pid file early; no live process 5 s in means it died.
		if ((i >= 20)) && ! node_pid "$n" >/dev/null; then
			what="exited"
			break
		fi
		sleep 0.25
	done
	echo "cluster: node $n (127.0.0.1:$(node_tcp_port "$n")) $what; last errors in $CLUSTER_DIR/n$n/log/clickhouse-server.err.log:" >&2
	# Without the stack-trace lines.
	grep -v '^[0-9]*\. ' "$CLUSTER_DIR/n$n/log/clickhouse-server.err.log" 2>/dev/null | tail -n 15 >&2 || true
	return 1
}

# stop_pid NAME PID SIGNAL: sends SIGNAL (TERM or KILL) and waits up to 30 s
# for the process to exit (then KILLs it).
stop_pid() {
	local name="$1" pid="$2" sig="$3" i
	kill "-$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < 120; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.25
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "cluster: $name (pid $pid) still alive after 30s, sending KILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	echo "cluster: $name stopped (pid $pid, SIG$sig)" >&2
}
