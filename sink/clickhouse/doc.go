// Package clickhouse is surveysync's ClickHouse warehouse: the sink the
// pipeline writes Arrow batches to, the store of stream checkpoints
// (sync_state) and known surveys (surveys), and the home of the feature
// stores other files of this package add (webhook_events, feed ledgers,
// uploaded_files); OpenWarehouse returns them as one warehouse.Warehouse.
// docs/schema.md describes every table and view for analysts.
//
// # Schema and migrations
//
// The schema lives in migrations/NNNN_name.sql, embedded and applied in
// version order by Open, each recorded in <db>.schema_migrations (version,
// name, applied_at) after all its statements succeeded. Ranges: 0001–0009
// core, 0010–0019 webhooks, 0020–0029 feeds, 0030–0039 files. A file is a
// text/template (fields and helpers: see tmplData) whose statements are
// separated by a line holding only ";"; lines starting with "--" are
// dropped. Every statement must be idempotent: two daemons starting at once
// both run the pending migrations, and a crash mid-migration runs it again.
// Use CREATE … IF NOT EXISTS; 18.16 has no ADD COLUMN IF NOT EXISTS, so the
// runner counts "column already exists" after ALTER TABLE … ADD COLUMN as
// done. A view is changed by a new migration that drops and recreates it
// (DROP VIEW IF EXISTS, then CREATE VIEW IF NOT EXISTS).
//
// The DDL works on Debian's ClickHouse 18.16 and on current releases (26.x,
// checked through chdb by the chdbcheck package): DateTime('UTC') rather than
// DateTime64, no Map, no LowCardinality (experimental on 18.16), Nullable
// never in a sorting key, every INSERT names its columns.
//
// # Versions, retries and the views
//
// Every row carries _version (the pipeline's fetch time in ns) and the
// tables are ReplacingMergeTree(_version). responses is sorted by
// (survey_id, response_id): merges keep a response's latest version.
// answers is sorted by (survey_id, response_id, _version, page_index,
// question_index, answer_index): the answers of different versions coexist
// (a newer version may have fewer answers), while a re-write of the same
// version collapses row for row. The *_current views use FINAL, so they are
// exact before any merge: responses_current shows each response once at its
// latest version unless that version is a deletion, and answers_current only
// the answers whose (response_id, _version) is that latest version.
//
// Write inserts answers first, then responses. After a crash between the
// two, the new answers are invisible (no responses row has their version)
// and the previous version stays complete; the pipeline's retry writes both
// again, and the duplicate answers collapse. The pipeline owns write
// retries (the sink makes one attempt per insert); the sink reports data
// errors as permanent.Error so that they are not retried.
// Correctness never depends on insert_deduplication_token or
// non_replicated_deduplication_window (18.16 has neither).
//
// The Arrow columns are converted column-wise into the slices
// clickhouse-go's batch columns accept (append.go); response_id goes from
// the GUID string to UUID.
//
// # Cluster mode
//
// With Options.Cluster set, every statement runs ON CLUSTER, and every table
// read by its public name is split: <name>_local holds the rows on each
// shard (same engine and keys), and <name> is a Distributed table over it.
// responses and answers are both sharded by the response_id, so all
// versions and answers of a response live on one shard: ReplacingMergeTree
// and FINAL work per shard, and answers_current checks versions against the
// shard's own responses_local (a non-GLOBAL IN sent with the query to every
// shard). Inserts go to the Distributed tables with
// insert_distributed_sync=1, so Write returns only once the shards have the
// rows (on one replica each, or InsertQuorum of them).
//
// The _local tables are Replicated* (Options.Unreplicated turns that off
// for clusters without replicas), with the ZooKeeper path
// <ZooKeeperPrefix>/{shard}/<db>/<table>_local and replica '{replica}';
// schema_migrations is one table replicated to every node. Sharding keys
// hash strings and integers only (cityHash64(toString(response_id))):
// ClickHouse 18.16 cannot hash a UUID. The layout is tested against a real
// 2 shards × 2 replicas cluster with ZooKeeper (scripts/cluster-up.sh;
// make test-cluster runs this package's integration tests on it), the DDL
// is pinned by golden files (testdata/ddl_cluster.sql). See
// docs/operations.md, "Running on a ClickHouse cluster".
//
// # Metrics
//
// surveysync_clickhouse_insert_duration_seconds{table},
// surveysync_clickhouse_rows_written_total{table},
// surveysync_clickhouse_insert_errors_total{table,code} and
// surveysync_clickhouse_batch_rows{table}, on Options.Registerer.
package clickhouse
