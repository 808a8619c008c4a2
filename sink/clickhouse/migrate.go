package clickhouse

import (
	"bufio"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// migration is one file migrations/NNNN_name.sql.
type migration struct {
	Version int
	Name    string
	File    string
	Text    string
}

var migrationFileRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// loadMigrations reads every migrations/*.sql of fsys, sorted by version.
// Two files with the same version are an error.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	seen := map[int]string{}
	for _, file := range names {
		base := path.Base(file)
		m := migrationFileRE.FindStringSubmatch(base)
		if m == nil {
			return nil, fmt.Errorf("clickhouse: migration %s: name must look like NNNN_name.sql", file)
		}
		v, _ := strconv.Atoi(m[1])
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("clickhouse: migrations %s and %s share version %d", other, base, v)
		}
		seen[v] = base
		text, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{Version: v, Name: m[2], File: base, Text: string(text)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// tmplData is what a migration template sees:
//
//	{{.DB}}                 the database name
//	{{.OnCluster}}          "" or " ON CLUSTER <name>"
//	{{.Cluster}}            "" or the cluster name
//	{{.Local "t"}}          where rows of table t are stored: "db.t", or in
//	                        cluster mode "db.t_local" (one per shard)
//	{{.Engine "t" "ReplacingMergeTree(_version)"}}
//	                        the engine of t's storage table: as given on a
//	                        single server (and on a cluster without
//	                        replication); on a replicated cluster the
//	                        Replicated* engine with the ZooKeeper path
//	                        <prefix>/{shard}/<db>/t_local and replica
//	                        '{replica}' (the server's macros)
//	{{.Distributed "t" "sharding key"}}
//	                        "" on a single server; in cluster mode the
//	                        statement creating the Distributed table db.t over
//	                        db.t_local. Put it alone between ";" lines.
//	{{.Redistribute "t" "sharding key"}}
//	                        "" on a single server; in cluster mode DROP and
//	                        CREATE of the Distributed table db.t (it holds no
//	                        rows of its own), to change its sharding key,
//	                        or its columns after an ALTER of t_local
//	                        (ClickHouse 18.16 refuses ALTER … ON CLUSTER of
//	                        a Distributed table when shards have replicas).
//
// A table every query and insert should see through its public name is
// created as {{.Local "t"}} with {{.Engine …}}, followed by
// {{.Distributed "t" "key"}}; views read the public names. Sharding keys
// must give the same shard on every supported server version: hash
// strings and integers, never a UUID itself (ClickHouse 18.16 cannot hash
// one: cityHash64(toString(uuid)) instead).
type tmplData struct {
	DB        string
	OnCluster string
	Cluster   string
	// Replicated makes {{.Engine}} return Replicated* engines.
	Replicated bool
	// ZooKeeperPrefix starts every replicated table's ZooKeeper path.
	ZooKeeperPrefix string
}

// DefaultZooKeeperPrefix is Options.ZooKeeperPrefix's default, also
// config's clickhouse.zookeeper_prefix.
const DefaultZooKeeperPrefix = "/clickhouse/tables"

// newTmplData is the layout of database db: a single server when cluster
// is "", else the cluster layout, replicated when onClusterDDL is set
// (tests build the unreplicated layout on a one-shard cluster without
// ZooKeeper by turning ON CLUSTER off). Open adjusts Replicated and
// ZooKeeperPrefix from Options.
func newTmplData(db, cluster string, onClusterDDL bool) tmplData {
	d := tmplData{DB: db, Cluster: cluster, ZooKeeperPrefix: DefaultZooKeeperPrefix}
	if cluster != "" && onClusterDDL {
		d.OnCluster = " ON CLUSTER " + cluster
		d.Replicated = true
	}
	return d
}

// Local is the storage table of the public table name.
func (d tmplData) Local(name string) string {
	if d.Cluster == "" {
		return d.DB + "." + name
	}
	return d.DB + "." + name + "_local"
}

// Engine is the engine clause of name's storage table: engine as given
// ("ReplacingMergeTree(_version)"), or on a replicated cluster its
// Replicated* form with the table's ZooKeeper path and replica macro.
func (d tmplData) Engine(name, engine string) (string, error) {
	if !d.Replicated || d.Cluster == "" {
		return engine, nil
	}
	open := strings.IndexByte(engine, '(')
	if open < 0 || !strings.HasSuffix(engine, ")") || !strings.HasSuffix(engine[:open], "MergeTree") {
		return "", fmt.Errorf("engine %q of %s: want <Kind>MergeTree(<args>)", engine, name)
	}
	args := strings.TrimSpace(engine[open+1 : len(engine)-1])
	path := fmt.Sprintf("%s/{shard}/%s/%s_local", strings.TrimRight(d.ZooKeeperPrefix, "/"), d.DB, name)
	repl := fmt.Sprintf("Replicated%s(%s, '{replica}'", engine[:open], quoteString(path))
	if args != "" {
		repl += ", " + args
	}
	return repl + ")", nil
}

// Distributed is the DDL of the Distributed table name over its local
// table, sharded by shardingKey; "" on a single server.
func (d tmplData) Distributed(name, shardingKey string) string {
	if d.Cluster == "" {
		return ""
	}
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s%s AS %s\nENGINE = Distributed(%s, %s, %s_local, %s)",
		d.DB, name, d.OnCluster, d.Local(name), d.Cluster, d.DB, name, shardingKey)
}

// Redistribute re-creates the Distributed table name with shardingKey;
// "" on a single server.
func (d tmplData) Redistribute(name, shardingKey string) string {
	if d.Cluster == "" {
		return ""
	}
	return fmt.Sprintf("DROP TABLE IF EXISTS %s.%s%s\n;\n%s", d.DB, name, d.OnCluster, d.Distributed(name, shardingKey))
}

// render executes a migration's template and splits it into statements: a
// line holding only ";" separates them; lines starting with "--" are
// dropped; empty statements are skipped.
func render(m migration, d tmplData) ([]string, error) {
	t, err := template.New(m.File).Option("missingkey=error").Parse(m.Text)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: migration %s: %w", m.File, err)
	}
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("clickhouse: migration %s: %w", m.File, err)
	}
	var stmts []string
	var cur []string
	flush := func() {
		s := strings.TrimSpace(strings.Join(cur, "\n"))
		if s != "" {
			stmts = append(stmts, s)
		}
		cur = cur[:0]
	}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch {
		case strings.TrimSpace(line) == ";":
			flush()
		case strings.HasPrefix(strings.TrimSpace(line), "--"):
		default:
			cur = append(cur, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: migration %s: %w", m.File, err)
	}
	flush()
	return stmts, nil
}

// bootstrap are the statements run before any migration. On a replicated
// cluster schema_migrations is one table replicated to every node (one
// ZooKeeper path for the whole cluster, replica '{shard}-{replica}'), so a
// migration recorded through any node counts on all of them; otherwise it
// is per node, and re-applying a migration on another node is harmless.
// migration_lock, the migrations lock (migratelock.go), is replicated the
// same way, so that daemons talking to different nodes see each other's
// claims.
func bootstrap(d tmplData) []string {
	engine := "ReplacingMergeTree(applied_at)"
	lockEngine := "MergeTree"
	if d.Replicated && d.Cluster != "" {
		prefix := strings.TrimRight(d.ZooKeeperPrefix, "/")
		path := fmt.Sprintf("%s/all/%s/schema_migrations", prefix, d.DB)
		engine = fmt.Sprintf("ReplicatedReplacingMergeTree(%s, '{shard}-{replica}', applied_at)", quoteString(path))
		lockEngine = fmt.Sprintf("ReplicatedMergeTree(%s, '{shard}-{replica}')", quoteString(fmt.Sprintf("%s/all/%s/migration_lock", prefix, d.DB)))
	}
	return []string{
		fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %s%s", d.DB, d.OnCluster),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.schema_migrations%s
(
    version UInt32,
    name String,
    applied_at DateTime('UTC')
)
ENGINE = %s
ORDER BY version`, d.DB, d.OnCluster, engine),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s%s
(
    holder String,
    host String,
    pid UInt32,
    heartbeat_at DateTime('UTC'),
    released UInt8
)
ENGINE = %s
ORDER BY (holder, heartbeat_at)`, migrationLockTable(d.DB), d.OnCluster, lockEngine),
	}
}

// bootstrapObjects are the objects bootstrap's statements create, in
// order ("" for the database itself).
var bootstrapObjects = []string{"", "schema_migrations", "migration_lock"}

// migrate applies the migrations not yet recorded, one daemon at a time
// (the migrations lock, migratelock.go: a daemon that finds it held gets a
// *MigrationsBusyError and tries again later). Every statement is
// idempotent (IF NOT EXISTS; an ADD COLUMN of a column that exists counts
// as done), and a migration is recorded only after all its statements
// succeeded, so a migration interrupted by a crash or a cluster that did
// not finish a statement (*ClusterDDLError) is applied again, whole, at the
// next attempt. On a cluster nothing new is queued while a statement of
// the database is still unfinished on a node (pendingDDL).
func (s *Sink) migrate(ctx context.Context) error {
	fsys := fs.FS(migrationsFS)
	if s.opts.migrations != nil {
		fsys = s.opts.migrations
	}
	ms, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	// The database and schema_migrations first; the lock's table only
	// when a migration is pending (a database migrated by an older
	// version does not need every node up to get it before then).
	if err := s.runBootstrap(ctx, 2); err != nil {
		return err
	}
	applied, err := s.appliedMigrations(ctx)
	if err != nil {
		return err
	}
	if !pending(ms, applied) {
		return nil
	}
	if err := s.runBootstrap(ctx, len(bootstrapObjects)); err != nil {
		return err
	}
	lock, err := s.lockMigrations(ctx)
	if err != nil {
		return err
	}
	defer lock.release(ctx)
	// Another daemon may have applied them while this one waited.
	if applied, err = s.appliedMigrations(ctx); err != nil {
		return err
	}
	for _, m := range ms {
		if !applied[m.Version] {
			if err := s.pendingDDL(ctx, m.File); err != nil {
				return err
			}
			break
		}
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		stmts, err := render(m, s.tmpl)
		if err != nil {
			return err
		}
		start := time.Now()
		for i, stmt := range stmts {
			if err := s.execMigrationDDL(ctx, stmt); err != nil {
				return s.migrationError(ctx, m.File, i+1, stmt, err)
			}
		}
		if err := s.recordMigration(ctx, m); err != nil {
			return fmt.Errorf("clickhouse: record migration %s: %w", m.File, err)
		}
		s.log.Info("migration applied", "version", m.Version, "name", m.Name,
			"statements", len(stmts), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// pending reports whether a migration of ms is not in applied.
func pending(ms []migration, applied map[int]bool) bool {
	for _, m := range ms {
		if !applied[m.Version] {
			return true
		}
	}
	return false
}

// runBootstrap runs the first n bootstrap statements whose object the
// node does not have yet: after the first start none is queued again (on a
// cluster with a node down, each would wait clickhouse.ddl_timeout).
func (s *Sink) runBootstrap(ctx context.Context, n int) error {
	have, err := s.bootstrapped(ctx)
	if err != nil {
		return err
	}
	missing := false
	for _, o := range bootstrapObjects[:n] {
		missing = missing || !have[o]
	}
	if !missing {
		return nil
	}
	if err := s.pendingDDL(ctx, "bootstrap"); err != nil {
		return err
	}
	for i, stmt := range bootstrap(s.tmpl)[:n] {
		if have[bootstrapObjects[i]] {
			continue
		}
		if err := s.execMigrationDDL(ctx, stmt); err != nil {
			return s.migrationError(ctx, "bootstrap", i+1, stmt, err)
		}
	}
	return nil
}

// bootstrapped reads which of bootstrapObjects the node has ("" the
// database).
func (s *Sink) bootstrapped(ctx context.Context) (map[string]bool, error) {
	names, err := s.strings(ctx, `SELECT name FROM system.tables WHERE database = ?
UNION ALL SELECT '' FROM system.databases WHERE name = ?`, s.opts.Database, s.opts.Database)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read system.tables on %s: %w", strings.Join(s.opts.Addr, ","), err)
	}
	have := map[string]bool{}
	for _, n := range names {
		if slices.Contains(bootstrapObjects, n) {
			have[n] = true
		}
	}
	return have, nil
}

// strings runs a query of one String column.
func (s *Sink) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	return queryColumn[string](ctx, s.conn, query, args...)
}

// recordMigration inserts m into schema_migrations. (A batch, not Exec of
// INSERT … VALUES: ClickHouse 18 then waits for a data block that Exec never
// sends.)
func (s *Sink) recordMigration(ctx context.Context, m migration) error {
	batch, err := s.conn.PrepareBatch(ctx, fmt.Sprintf(
		"INSERT INTO %s.schema_migrations (version, name, applied_at)", s.opts.Database))
	if err != nil {
		return err
	}
	defer batch.Close()
	if err := batch.Append(uint32(m.Version), m.Name, time.Now().UTC()); err != nil {
		return err
	}
	return batch.Send()
}

// appliedMigrations reads the versions recorded in schema_migrations.
func (s *Sink) appliedMigrations(ctx context.Context) (map[int]bool, error) {
	rows, err := s.conn.Query(ctx, fmt.Sprintf("SELECT DISTINCT version FROM %s.schema_migrations", s.opts.Database))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read %s.schema_migrations: %w", s.opts.Database, err)
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("clickhouse: read %s.schema_migrations: %w", s.opts.Database, err)
		}
		applied[int(v)] = true
	}
	return applied, rows.Err()
}

// execDDL runs one DDL statement. A concurrent daemon creating the same
// object can make an IF NOT EXISTS statement fail with "already exists" on
// old servers: that counts as success.
//
// ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: an ALTER … ADD COLUMN
// that fails because the column already exists counts as done too.
func (s *Sink) execDDL(ctx context.Context, stmt string) error {
	if err := s.execDDLRaw(ctx, stmt); err != nil {
		return s.clusterDDLError(err)
	}
	return nil
}

// execMigrationDDL runs a statement of a migration (execDDLRaw). On a
// replicated cluster, a node killed while it created a replicated table
// can leave the table's replica registered in ZooKeeper without the table
// (ClickHouse registers the replica, then writes the table's metadata): the
// CREATE … IF NOT EXISTS then fails on that node, for ever, with "Replica …
// already exists" (code 253). The same statement as ATTACH TABLE IF NOT
// EXISTS … ON CLUSTER attaches that replica on that node (and writes its
// metadata) and does nothing where the table exists.
func (s *Sink) execMigrationDDL(ctx context.Context, stmt string) error {
	err := s.execDDLRaw(ctx, stmt)
	if err == nil || !s.tmpl.Replicated || s.tmpl.OnCluster == "" || !isReplicaExists(err) || !createTableRE.MatchString(stmt) {
		return err
	}
	s.log.Warn("a node has this table's replica in ZooKeeper but not the table (it died while creating it): attaching the replica there",
		"statement", firstLine(stmt), "err", err)
	return s.execDDLRaw(ctx, createTableRE.ReplaceAllString(stmt, "ATTACH TABLE IF NOT EXISTS "))
}

var createTableRE = regexp.MustCompile(`^\s*CREATE\s+TABLE\s+IF\s+NOT\s+EXISTS\s+`)

// codeReplicaAlreadyExists is REPLICA_IS_ALREADY_EXIST.
const codeReplicaAlreadyExists = 253

func isReplicaExists(err error) bool {
	var ex *ch.Exception
	return errors.As(err, &ex) && ex.Code == codeReplicaAlreadyExists
}

// execDDLRaw is execDDL returning the server's error as it came (the
// migrations explain it themselves: migrationError).
func (s *Sink) execDDLRaw(ctx context.Context, stmt string) error {
	err := s.conn.Exec(s.ddlCtx(ctx), stmt)
	if err == nil {
		return nil
	}
	if isAlreadyExists(err) && strings.Contains(stmt, "IF NOT EXISTS") {
		s.log.Debug("object created concurrently", "error", err)
		return nil
	}
	if addColumnRE.MatchString(stmt) && isColumnExists(err) {
		s.log.Debug("column already added", "error", err)
		return nil
	}
	return err
}

// ddlCtx bounds how long an ON CLUSTER statement waits for every node.
func (s *Sink) ddlCtx(ctx context.Context) context.Context {
	if s.tmpl.OnCluster == "" {
		return ctx
	}
	secs := int((s.opts.DDLTimeout + time.Second - 1) / time.Second)
	return ch.Context(ctx, ch.WithSettings(ch.Settings{"distributed_ddl_task_timeout": s.signedSetting(secs)}))
}

// signedSetting encodes n for a setting the server reads as a signed
// integer. Servers older than revision 54429 (ClickHouse 18.16 among them)
// read settings in their binary form, a signed one as a zigzag varint,
// while clickhouse-go sends every integer as an unsigned varint: 60 would
// arrive as 30, 3 as -2 (wait for ever). Newer servers read settings as
// strings.
func (s *Sink) signedSetting(n int) int {
	if s.version.Revision <= 54429 && n >= 0 {
		return n << 1
	}
	return n
}

// clusterDDLError explains an ON CLUSTER statement's failure: which
// cluster, and what to check.
func (s *Sink) clusterDDLError(err error) error {
	if s.tmpl.OnCluster == "" {
		return err
	}
	var ex *ch.Exception
	if errors.As(err, &ex) && ex.Code == codeTimeoutExceeded {
		return fmt.Errorf("ON CLUSTER %s did not finish on every node within clickhouse.ddl_timeout (%s): "+
			"a node is down or the distributed DDL queue is stalled; the statement stays queued and runs when the node is back "+
			"(check system.clusters, each node's log and ZooKeeper /clickhouse/task_queue/ddl): %w",
			s.opts.Cluster, s.opts.DDLTimeout, err)
	}
	return fmt.Errorf("ON CLUSTER %s (needs ZooKeeper/Keeper and <distributed_ddl> on every node): %w", s.opts.Cluster, err)
}

var addColumnRE = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s.*\sADD\s+COLUMN\s`)

// ClickHouse error codes used here.
const (
	codeTimeoutExceeded       = 159
	codeSyntaxError           = 62
	codeIllegalColumn         = 44
	codeDuplicateColumn       = 15
	codeTableAlreadyExists    = 57
	codeDatabaseAlreadyExists = 82
)

func isColumnExists(err error) bool {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return (ex.Code == codeIllegalColumn || ex.Code == codeDuplicateColumn) &&
			strings.Contains(ex.Message, "already exists")
	}
	return false
}

func isAlreadyExists(err error) bool {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return ex.Code == codeTableAlreadyExists || ex.Code == codeDatabaseAlreadyExists
	}
	return false
}

// SchemaDDL returns every statement Open would run on an empty database, in
// order: the bootstrap, then each embedded migration. cluster "" is the
// single-server layout. It is what `surveysync` can print for a DBA and
// what the chdb check runs on a current ClickHouse.
func SchemaDDL(database, cluster string) ([]string, error) {
	if !identRE.MatchString(database) || (cluster != "" && !identRE.MatchString(cluster)) {
		return nil, fmt.Errorf("clickhouse: schema DDL: bad database %q or cluster %q", database, cluster)
	}
	d := newTmplData(database, cluster, true)
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		return nil, err
	}
	stmts := bootstrap(d)
	for _, m := range ms {
		ss, err := render(m, d)
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, ss...)
	}
	return stmts, nil
}
