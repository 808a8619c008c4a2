package clickhouse

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// coreDDL renders the bootstrap and the core migrations (0001–0009) as one
// text, statements separated by ";" lines.
func coreDDL(t *testing.T, d tmplData) string {
	t.Helper()
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		t.Fatal(err)
	}
	stmts := bootstrap(d)
	for _, m := range ms {
		if m.Version > 9 {
			continue
		}
		ss, err := render(m, d)
		if err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, "-- "+m.File)
		stmts = append(stmts, ss...)
	}
	return strings.Join(stmts, "\n;\n") + "\n"
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, diff)
	}
}

func TestGoldenDDLSingle(t *testing.T) {
	checkGolden(t, "ddl_single.sql", coreDDL(t, newTmplData("surveysync", "", true)))
}

func TestGoldenDDLCluster(t *testing.T) {
	got := coreDDL(t, newTmplData("surveysync", "warehouse", true))
	checkGolden(t, "ddl_cluster.sql", got)
	// Every statement runs on the whole cluster, and every storage table has
	// its Distributed table under the public name.
	for _, stmt := range strings.Split(got, "\n;\n") {
		if strings.HasPrefix(stmt, "--") {
			continue
		}
		if !strings.Contains(stmt, " ON CLUSTER warehouse") {
			t.Errorf("statement without ON CLUSTER:\n%s", stmt)
		}
	}
	for _, table := range []string{"responses", "answers", "sync_state", "surveys"} {
		local := "CREATE TABLE IF NOT EXISTS surveysync." + table + "_local ON CLUSTER warehouse"
		dist := "CREATE TABLE IF NOT EXISTS surveysync." + table + " ON CLUSTER warehouse AS surveysync." + table + "_local\nENGINE = Distributed(warehouse, surveysync, " + table + "_local, "
		if !strings.Contains(got, local) || !strings.Contains(got, dist) {
			t.Errorf("cluster DDL lacks %s_local or its Distributed table", table)
		}
	}
	if !strings.Contains(got, "FROM surveysync.responses_local FINAL") {
		t.Error("answers_current must check versions against the shard's local responses")
	}
}

func TestLoadMigrations(t *testing.T) {
	ms, err := loadMigrations(migrationsFS)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 || ms[0].Version != 1 || ms[0].Name != "core_tables" || ms[1].Version != 2 {
		t.Fatalf("migrations = %+v", ms)
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].Version <= ms[i-1].Version {
			t.Errorf("not sorted: %s after %s", ms[i].File, ms[i-1].File)
		}
	}
	// Every migration renders in both modes.
	for _, d := range []tmplData{newTmplData("db", "", true), newTmplData("db", "c", true)} {
		for _, m := range ms {
			if _, err := render(m, d); err != nil {
				t.Errorf("%s: %v", m.File, err)
			}
		}
	}

	dup := fstest.MapFS{
		"migrations/0001_a.sql": {Data: []byte("SELECT 1")},
		"migrations/0001_b.sql": {Data: []byte("SELECT 2")},
	}
	if _, err := loadMigrations(dup); err == nil || !strings.Contains(err.Error(), "share version 1") {
		t.Errorf("duplicate versions: err = %v", err)
	}
	bad := fstest.MapFS{"migrations/1_a.sql": {Data: []byte("SELECT 1")}}
	if _, err := loadMigrations(bad); err == nil {
		t.Error("badly named migration accepted")
	}
}

func TestRenderSplitsStatements(t *testing.T) {
	m := migration{File: "0005_x.sql", Text: `-- a comment
CREATE TABLE IF NOT EXISTS {{.Local "t"}}{{.OnCluster}} (a UInt8) ENGINE = MergeTree ORDER BY a
;
   ;
{{.Distributed "t" "rand()"}}
;
-- only a comment
;
SELECT ';' -- not a separator
`}
	got, err := render(m, newTmplData("db", "", true))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CREATE TABLE IF NOT EXISTS db.t (a UInt8) ENGINE = MergeTree ORDER BY a",
		"SELECT ';' -- not a separator",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("single (-want +got):\n%s", diff)
	}
	got, err = render(m, newTmplData("db", "c", false))
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"CREATE TABLE IF NOT EXISTS db.t_local (a UInt8) ENGINE = MergeTree ORDER BY a",
		"CREATE TABLE IF NOT EXISTS db.t AS db.t_local\nENGINE = Distributed(c, db, t_local, rand())",
		"SELECT ';' -- not a separator",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster without ON CLUSTER (-want +got):\n%s", diff)
	}
	if _, err := render(migration{File: "0006_y.sql", Text: "{{.Nope}}"}, newTmplData("db", "", true)); err == nil {
		t.Error("unknown template field accepted")
	}
}

// ALTER … ADD COLUMN re-applied (a crash before the record, or two daemons)
// must not fail, although 18.16 has no ADD COLUMN IF NOT EXISTS.
func TestMigrationReapplied(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/0001_t.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS {{.Local "t"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "t" "MergeTree()"}} ORDER BY a
;
ALTER TABLE {{.Local "t"}}{{.OnCluster}} ADD COLUMN b String
`)},
	}
	s, _ := openTest(t, func(o *Options) { o.migrations = fsys })
	if s.tmpl.Replicated {
		// ALTER … DELETE (a mutation) on a replicated table can crash
		// ClickHouse 18.16 (a segfault in tryFinalizeMutations, seen on the
		// test cluster), and surveysync never runs one: re-run the
		// migration's statements ON CLUSTER instead.
		stmts, err := render(migration{File: "0001_t.sql", Text: string(fsys["migrations/0001_t.sql"].Data)}, s.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range stmts {
			if err := s.execDDL(ctxT(t), stmt); err != nil {
				t.Fatalf("re-applying %q on the cluster: %v", stmt, err)
			}
		}
		return
	}
	if err := s.Conn().Exec(ctxT(t), "ALTER TABLE "+s.table("schema_migrations")+" DELETE WHERE version = 1"); err != nil {
		t.Fatal(err)
	}
	// ALTER … DELETE is asynchronous on 18.16: wait until the record is gone.
	deadline := time.Now().Add(30 * time.Second)
	for countRows(t, s, "SELECT count() FROM "+s.table("schema_migrations")) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("schema_migrations record not deleted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	s2, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), fsys))
	if err != nil {
		t.Fatalf("re-applying a migration with ADD COLUMN: %v", err)
	}
	s2.Close()
}

func withMigrations(o Options, fsys fstest.MapFS) Options {
	o.migrations = fsys
	return o
}

// The migrations lock: a live claim of another daemon makes Open return a
// *MigrationsBusyError (nothing applied) while a migration is pending; a
// claim not renewed within migrationLockExpiry (a daemon killed while
// migrating) or released does not.
func TestMigrationsLock(t *testing.T) {
	one := fstest.MapFS{"migrations/0001_t.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS {{.Local "t"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "t" "MergeTree()"}} ORDER BY a`)}}
	two := fstest.MapFS{
		"migrations/0001_t.sql": one["migrations/0001_t.sql"],
		"migrations/0002_u.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS {{.Local "u"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "u" "MergeTree()"}} ORDER BY a`)},
	}
	s, _ := openTest(t, func(o *Options) { o.migrations = one })
	claim := func(holder string, age time.Duration, released int) {
		t.Helper()
		err := s.Conn().Exec(ctxT(t), "INSERT INTO "+migrationLockTable(s.Database())+" (holder, host, pid, heartbeat_at, released) SELECT ?, 'elsewhere', toUInt32(4242), now() - ?, toUInt8(?)",
			holder, int64(age/time.Second), released)
		if err != nil {
			t.Fatal(err)
		}
	}
	claim("dead", migrationLockExpiry+5*time.Second, 0)
	claim("gone", 0, 0)
	claim("gone", 0, 1)
	claim("live", 0, 0)
	_, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), two))
	var busy *MigrationsBusyError
	if !errors.As(err, &busy) || busy.Host != "elsewhere" || busy.PID != 4242 || !Unreachable(err) {
		t.Fatalf("Open with a live claim of another daemon: %v", err)
	}
	t.Logf("%v; fix: %s", err, busy.Fix())
	if n := countRows(t, s, "SELECT count() FROM system.tables WHERE database = '"+s.Database()+"' AND name LIKE 'u%'"); n != 0 {
		t.Fatal("a migration was applied while another daemon held the lock")
	}
	// Without pending migrations the lock is not even asked for.
	s1, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), one))
	if err != nil {
		t.Fatalf("Open with nothing to apply: %v", err)
	}
	s1.Close()
	claim("live", 0, 1)
	s2, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), two))
	if err != nil {
		t.Fatalf("Open once the claim is released: %v", err)
	}
	s2.Close()
	if n := countRows(t, s, "SELECT count() FROM "+migrationLockTable(s.Database())+" WHERE released = 0 AND host != 'elsewhere' AND heartbeat_at > now() - 60"); n == 0 {
		t.Error("Open left no claim of its own")
	}
	if n := countRows(t, s, "SELECT count() FROM "+migrationLockTable(s.Database())+" WHERE released = 1 AND host != 'elsewhere'"); n != 2 {
		t.Errorf("%d claims released, want 2 (openTest's first Open, the last one)", n)
	}
}

// A database migrated before the lock existed gets migration_lock only
// when a migration is pending: a start with nothing to apply queues no DDL
// (on a cluster it would need every node up).
func TestMigrationLockTableOnlyWhenPending(t *testing.T) {
	one := fstest.MapFS{"migrations/0001_t.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS {{.Local "t"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "t" "MergeTree()"}} ORDER BY a`)}}
	two := fstest.MapFS{
		"migrations/0001_t.sql": one["migrations/0001_t.sql"],
		"migrations/0002_u.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS {{.Local "u"}}{{.OnCluster}} (a UInt8) ENGINE = {{.Engine "u" "MergeTree()"}} ORDER BY a`)},
	}
	s, _ := openTest(t, func(o *Options) { o.migrations = one })
	if err := s.execDDL(ctxT(t), "DROP TABLE "+migrationLockTable(s.Database())+s.tmpl.OnCluster); err != nil {
		t.Fatal(err)
	}
	lockTable := "SELECT count() FROM system.tables WHERE database = '" + s.Database() + "' AND name = 'migration_lock'"
	s1, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), one))
	if err != nil {
		t.Fatal(err)
	}
	s1.Close()
	if countRows(t, s, lockTable) != 0 {
		t.Error("migration_lock created although nothing was pending")
	}
	s2, err := Open(ctxT(t), withMigrations(testOptions(s.Database()), two))
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if countRows(t, s, lockTable) != 1 {
		t.Error("migration_lock not created for a pending migration")
	}
}
