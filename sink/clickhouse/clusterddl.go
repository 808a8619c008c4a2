package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// DDLQueuePath is where ClickHouse queues ON CLUSTER statements in
// ZooKeeper (<distributed_ddl><path>, the server's default): the migrations
// read it to name the nodes that have not run a statement.
const DDLQueuePath = "/clickhouse/task_queue/ddl"

// ddlStallAge is how old an unfinished ON CLUSTER task of the database must
// be before a start counts it as stalled (a running daemon's own DDL, a
// wide view say, takes well under a second on a healthy cluster).
const ddlStallAge = 3 * time.Second

// ClusterDDLError is a migration the cluster could not finish: a node of
// the cluster is down, or its distributed DDL queue is stalled (its
// DDLWorker stopped). The statement stays queued in ZooKeeper and runs when
// the node is back; the daemon waits this out with back-off
// (docs/operations.md, "Start-up"), and the migrations, idempotent, are
// applied again from the failed one.
type ClusterDDLError struct {
	Cluster   string
	Migration string   // the migration's file, or "bootstrap"
	Statement int      // 1-based, within the migration
	Query     string   // the statement's first line
	Nodes     []string // host:port of the nodes that have not run it (empty: unknown)
	// Pending: found before running anything, an earlier statement of
	// the database still unfinished on Nodes (nothing new was queued).
	Pending bool
	Err     error
}

func (e *ClusterDDLError) Unwrap() error { return e.Err }

func (e *ClusterDDLError) Error() string {
	return "clickhouse: " + e.Summary() + ": " + e.Err.Error()
}

// Summary says what waits for what, without the server's message: the
// node, the migration and the statement.
func (e *ClusterDDLError) Summary() string {
	who := "a node"
	if len(e.Nodes) > 0 {
		who = "node " + strings.Join(e.Nodes, ", node ")
	}
	what := fmt.Sprintf("migration %s statement %d (%s)", e.Migration, e.Statement, e.Query)
	if e.Pending {
		return fmt.Sprintf("cluster %s: migration %s waits: %s has not run the ON CLUSTER statement queued before (%s): down, or its distributed DDL queue stalled",
			e.Cluster, e.Migration, who, e.Query)
	}
	return fmt.Sprintf("cluster %s: %s did not finish on every node: %s has not run it (down, or its distributed DDL queue stalled)",
		e.Cluster, what, who)
}

// Fix is what the operator does.
func (e *ClusterDDLError) Fix() string {
	where := "the node that is down"
	if len(e.Nodes) > 0 {
		where = "ClickHouse on " + strings.Join(e.Nodes, " and ")
	}
	stmt := fmt.Sprintf("migration %s statement %d", e.Migration, e.Statement)
	if e.Pending {
		stmt = "the statement migration " + e.Migration + " waits for"
	}
	return fmt.Sprintf("start %s (if it runs, restart it: its DDL worker may have stopped, its error log says \"DDLWorker\"); "+
		"%s stays queued in ZooKeeper %s and runs when the node is back; surveysync retries the migrations by itself "+
		"(check system.clusters of cluster %s and each node's log)", where, stmt, DDLQueuePath, e.Cluster)
}

// clusterIncomplete reports whether err, from an ON CLUSTER statement,
// means a node did not (yet) run it — a timeout, a replica that could not
// take the shard's lock because its peer died holding it (18.x: "Cannot
// enqueue replicated DDL query"), a transient condition on a node — rather
// than a refusal of the statement.
func clusterIncomplete(err error) bool {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return ex.Code == codeTimeoutExceeded || strings.Contains(ex.Message, "Cannot enqueue replicated DDL query") ||
			transientException(ex.Code)
	}
	return false
}

// ddlTask is one ON CLUSTER task of the queue.
type ddlTask struct {
	name       string
	query      string   // its statement's first line
	hosts      []string // host:port
	unfinished []string
	age        time.Duration
}

var (
	ddlHostsRE = regexp.MustCompile(`(?m)^hosts: \[(.*)\]$`)
	ddlQueryRE = regexp.MustCompile(`(?m)^query: (.*)$`)
)

// lastDDLTask reads the newest task of the queue naming the database (nil:
// none, or the queue is not readable: the diagnosis is best effort).
func (s *Sink) lastDDLTask(ctx context.Context) *ddlTask {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		name, value string
		age         int64
	)
	err := s.conn.QueryRow(ctx, `SELECT name, value, toInt64(now()) - toInt64(ctime)
FROM system.zookeeper
WHERE path = ? AND match(value, ?)
ORDER BY name DESC LIMIT 1`, DDLQueuePath, `\b`+s.opts.Database+`\b`).Scan(&name, &value, &age)
	if err != nil {
		s.log.Debug("distributed DDL queue not readable", "path", DDLQueuePath, "err", err)
		return nil
	}
	t := &ddlTask{name: name, age: time.Duration(age) * time.Second}
	if m := ddlQueryRE.FindStringSubmatch(value); m != nil {
		// The query is stored escaped: a newline as \n.
		q, _, _ := strings.Cut(m[1], `\n`)
		t.query = firstLine(q)
	}
	if m := ddlHostsRE.FindStringSubmatch(value); m != nil {
		for _, h := range strings.Split(m[1], ",") {
			h = strings.Trim(strings.TrimSpace(h), "'")
			if u, err := url.PathUnescape(h); err == nil {
				h = u
			}
			if h != "" {
				t.hosts = append(t.hosts, h)
			}
		}
	}
	finished, err := s.strings(ctx, "SELECT name FROM system.zookeeper WHERE path = ?", DDLQueuePath+"/"+name+"/finished")
	if err != nil {
		s.log.Debug("distributed DDL task not readable", "task", name, "err", err)
		return nil
	}
	done := map[string]bool{}
	for _, f := range finished {
		if u, err := url.PathUnescape(f); err == nil {
			f = u
		}
		done[f] = true
	}
	// A node removed from the cluster since never finishes the task
	// (until the server drops it, a week later): only the cluster's
	// current nodes count.
	members, err := s.strings(ctx, "SELECT concat(host_name, ':', toString(port)) FROM system.clusters WHERE cluster = ?", s.opts.Cluster)
	if err != nil {
		s.log.Debug("system.clusters not readable", "err", err)
		return nil
	}
	for _, h := range t.hosts {
		if !done[h] && slices.Contains(members, h) {
			t.unfinished = append(t.unfinished, h)
		}
	}
	slices.Sort(t.unfinished)
	return t
}

// pendingDDL is the start's check before it queues any ON CLUSTER
// statement of migration file (the next one to apply): the database's
// newest task unfinished on some node for longer than ddlStallAge (a node
// down since, or its queue stalled). Queuing more would only pile
// statements up behind it.
func (s *Sink) pendingDDL(ctx context.Context, file string) error {
	if s.tmpl.OnCluster == "" {
		return nil
	}
	t := s.lastDDLTask(ctx)
	if t == nil || len(t.unfinished) == 0 || t.age < ddlStallAge {
		return nil
	}
	return &ClusterDDLError{
		Cluster: s.opts.Cluster, Migration: file, Query: t.query, Nodes: t.unfinished, Pending: true,
		Err: fmt.Errorf("the ON CLUSTER task %s/%s has been unfinished on %s for %s", DDLQueuePath, t.name, strings.Join(t.unfinished, ", "), t.age),
	}
}

// migrationError explains a failed migration statement: a
// *ClusterDDLError naming the nodes when the cluster did not finish it,
// else the error with the migration and statement.
func (s *Sink) migrationError(ctx context.Context, file string, n int, stmt string, err error) error {
	if s.tmpl.OnCluster != "" && clusterIncomplete(err) {
		e := &ClusterDDLError{Cluster: s.opts.Cluster, Migration: file, Statement: n, Query: firstLine(stmt), Err: err}
		if t := s.lastDDLTask(context.WithoutCancel(ctx)); t != nil {
			e.Nodes = t.unfinished
		}
		return e
	}
	if file == "bootstrap" {
		return fmt.Errorf("clickhouse: bootstrap %s statement %d: %w", s.opts.Database, n, err)
	}
	return fmt.Errorf("clickhouse: migration %s statement %d: %w", file, n, err)
}

// firstLine is a statement's first line, shortened for a log line.
func firstLine(stmt string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(stmt), "\n")
	l = strings.TrimSpace(l)
	if len(l) > 120 {
		l = l[:117] + "..."
	}
	return l
}
