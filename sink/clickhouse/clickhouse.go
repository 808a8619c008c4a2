package clickhouse

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/wide"
)

// DefaultDatabase is Options.Database's default, also config's
// (clickhouse.database).
const DefaultDatabase = "surveysync"

// DefaultDialTimeout is Options.DialTimeout's default, also config's
// clickhouse.dial_timeout.
const DefaultDialTimeout = 10 * time.Second

// DefaultDDLTimeout is Options.DDLTimeout's default, also config's
// clickhouse.ddl_timeout.
const DefaultDDLTimeout = 60 * time.Second

// Options configure Open. Plain values; cmd/ maps the YAML config onto them.
type Options struct {
	// Addr lists host:port of the native protocol (9000, or 9440 with Secure).
	Addr []string
	// Database holds every table; created if missing. Default "surveysync".
	Database string
	// Username and Password authenticate; the password is never logged.
	Username string
	Password string
	// Cluster, when set, creates every object ON CLUSTER and splits each
	// table into a <name>_local storage table plus a Distributed table with
	// the public name (see the package documentation).
	Cluster string
	// Unreplicated, with Cluster set, keeps the plain *MergeTree engines
	// for the _local tables (a cluster of shards without replicas that
	// wants no ZooKeeper writes per insert). By default the _local tables
	// are Replicated*: ON CLUSTER already needs ZooKeeper/Keeper, Replicated
	// engines work with one replica per shard, and replicas can be added
	// later. Open refuses Unreplicated on a cluster whose shards have
	// several replicas (each row would be on one replica only).
	Unreplicated bool
	// ZooKeeperPrefix starts the ZooKeeper path of each replicated table:
	// <prefix>/{shard}/<database>/<table>_local (default /clickhouse/tables).
	ZooKeeperPrefix string
	// InsertQuorum, above 1, makes an insert return only once that many
	// replicas of each shard have the rows (insert_quorum): a replica that
	// dies right after an insert then cannot take rows its peers have not
	// fetched yet out of reach. Inserts wait (and the pipeline retries)
	// while fewer replicas are up. Default 0: acknowledged by one replica.
	InsertQuorum int
	// DDLTimeout bounds how long an ON CLUSTER statement waits for every
	// node (distributed_ddl_task_timeout; default 60s).
	DDLTimeout time.Duration
	// Secure uses TLS on the native protocol.
	Secure bool
	// DialTimeout bounds connecting (default 10s).
	DialTimeout time.Duration
	// Wide chooses extras of the wide views (docs/schema.md, "Wide tables").
	Wide WideOptions
	// Logger receives operational messages (default: discarded).
	Logger *slog.Logger
	// Registerer receives the sink's metrics (default: a private registry).
	Registerer prometheus.Registerer

	// onClusterDDL=false with Cluster set builds the cluster layout
	// (Distributed tables over <name>_local) without ON CLUSTER: tests use it
	// against a one-shard cluster on a server without ZooKeeper.
	noOnClusterDDL bool
	// migrations replaces the embedded migrations (tests).
	migrations fs.FS
}

// LogValue masks the password when Options are logged.
func (o Options) LogValue() slog.Value {
	pw := ""
	if o.Password != "" {
		pw = "***"
	}
	return slog.GroupValue(
		slog.Any("addr", o.Addr),
		slog.String("database", o.Database),
		slog.String("username", o.Username),
		slog.String("password", pw),
		slog.String("cluster", o.Cluster),
		slog.Bool("replicated", o.Cluster != "" && !o.Unreplicated),
		slog.Bool("secure", o.Secure),
	)
}

// identRE is what Database and Cluster may look like: they are spliced into
// DDL text.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// zkPathRE is what ZooKeeperPrefix may look like (it may use the server's
// macros, e.g. /clickhouse/{cluster}/tables).
var zkPathRE = regexp.MustCompile(`^/[A-Za-z0-9_./{}-]*$`)

func (o *Options) setDefaults() {
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.ZooKeeperPrefix == "" {
		o.ZooKeeperPrefix = DefaultZooKeeperPrefix
	}
	if o.DDLTimeout <= 0 {
		o.DDLTimeout = DefaultDDLTimeout
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// validate checks the options after setDefaults.
func (o *Options) validate() error {
	if len(o.Addr) == 0 {
		return errors.New("clickhouse: options: addr: at least one host:port is required")
	}
	if !identRE.MatchString(o.Database) {
		return fmt.Errorf("clickhouse: options: database %q: must match %s", o.Database, identRE)
	}
	if o.Cluster != "" && !identRE.MatchString(o.Cluster) {
		return fmt.Errorf("clickhouse: options: cluster %q: must match %s", o.Cluster, identRE)
	}
	if !zkPathRE.MatchString(o.ZooKeeperPrefix) {
		return fmt.Errorf("clickhouse: options: zookeeper_prefix %q: must be an absolute path matching %s", o.ZooKeeperPrefix, zkPathRE)
	}
	return o.Wide.check()
}

// Sink is the ClickHouse warehouse: pipeline.Sink (Write), pipeline.StateStore
// (sync_state) and pipeline.SurveyStore (surveys). It is safe for concurrent
// use.
type Sink struct {
	conn    driver.Conn
	opts    Options
	tmpl    tmplData
	version driver.ServerVersion
	log     *slog.Logger
	metrics *metrics

	// views: the wide views' upkeep (wide.go, package wide).
	views *wide.Upkeep
	// noReplaceView: the server has no CREATE OR REPLACE VIEW (ClickHouse
	// 18.16).
	noReplaceView atomic.Bool

	mu          sync.Mutex
	lastVersion uint64 // last _version given to a sync_state/surveys row
}

// Open connects, creates the database if needed, detects the server's
// version and applies the embedded migrations that are not yet recorded in
// schema_migrations.
func Open(ctx context.Context, o Options) (*Sink, error) {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	chOpts := &ch.Options{
		Addr: o.Addr,
		Auth: ch.Auth{Username: o.Username, Password: o.Password},
		ClientInfo: ch.ClientInfo{Products: []struct{ Name, Version string }{
			{Name: "surveysync"},
		}},
		DialTimeout:     o.DialTimeout,
		ConnMaxLifetime: time.Hour,
		// A connection keeps its encoding buffer from query to query
		// (freeing it after each one made every INSERT grow it again from
		// nothing: a sixth of the daemon's allocated bytes on the 20k
		// harness). It is bounded: a block is at most insertBlockRows
		// rows, and the driver sends what it has encoded as soon as the
		// buffer holds maxEncodeBuffer bytes, so a connection keeps at
		// most that and one column's encoding.
		MaxCompressionBuffer: maxEncodeBuffer,
	}
	if o.Secure {
		chOpts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	conn, err := ch.Open(chOpts)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open %s: %w", strings.Join(o.Addr, ","), err)
	}
	s := &Sink{
		conn: retryClosed{conn},
		opts: o,
		tmpl: newTmplData(o.Database, o.Cluster, !o.noOnClusterDDL),
		// The caller names the component (cmd/surveysync: "clickhouse"):
		// naming it here too repeated the key in every line.
		log: o.Logger.With("database", o.Database),
	}
	s.tmpl.ZooKeeperPrefix = o.ZooKeeperPrefix
	if o.Unreplicated {
		s.tmpl.Replicated = false
	}
	if err := s.open(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sink) open(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		if hint := httpPortHint(ctx, s.opts.Addr); hint != "" {
			return &wrongPortError{hint: hint, err: err}
		}
		return fmt.Errorf("clickhouse: ping %s: %w", strings.Join(s.opts.Addr, ","), err)
	}
	v, err := s.conn.ServerVersion()
	if err != nil {
		return fmt.Errorf("clickhouse: server version: %w", err)
	}
	s.version = *v
	s.views = s.newViews()
	m, err := newMetrics(s.opts.Registerer)
	if err != nil {
		return err
	}
	s.metrics = m
	s.log.Info("connected", "server_version", s.ServerVersion(), "options", s.opts)
	if s.opts.Cluster != "" {
		if err := s.checkCluster(ctx); err != nil {
			return err
		}
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	return nil
}

// Conn is the underlying connection pool, for the feature stores that live
// in this package's other files and for tests.
func (s *Sink) Conn() driver.Conn { return s.conn }

// Database is the database holding every table.
func (s *Sink) Database() string { return s.opts.Database }

// Cluster is the cluster name, or "" on a single server.
func (s *Sink) Cluster() string { return s.opts.Cluster }

// ServerVersion is the server's version, e.g. "18.16.1", detected at Open
// and logged. Nothing depends on it yet: the schema and the writer use only
// what 18.16 has (see the package documentation).
func (s *Sink) ServerVersion() string { return s.version.Version.String() }

// Ping checks that the server answers.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("clickhouse: ping: %w", err)
	}
	return nil
}

// Close closes the connections. The metrics stay registered.
func (s *Sink) Close() error {
	return s.conn.Close()
}

// table is the fully qualified public name of a table or view.
func (s *Sink) table(name string) string { return s.opts.Database + "." + name }

// queryColumn runs q and reads its one column.
func queryColumn[T any](ctx context.Context, conn driver.Conn, q string, args ...any) ([]T, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// nextVersion returns a _version for a state/survey row: the current time in
// nanoseconds, strictly increasing within this process.
func (s *Sink) nextVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := uint64(time.Now().UnixNano())
	if v <= s.lastVersion {
		v = s.lastVersion + 1
	}
	s.lastVersion = v
	return v
}
