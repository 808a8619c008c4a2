-- instances: the lease of the daemon writing this database (issue 22, the
-- single-instance guard; docs/operations.md "One daemon per database"). Each
-- daemon adds a row at start and a new version every heartbeat; its last
-- version at stop has heartbeat_at 1970-01-01 (released). A daemon starting
-- refuses while another's heartbeat is fresh. heartbeat_at is the server's
-- time (now()), so the machines' clocks do not matter. The latest _version
-- of an instance wins; one row per daemon start, a few hundred bytes.
CREATE TABLE IF NOT EXISTS {{.Local "instances"}}{{.OnCluster}}
(
    instance_id String,
    host String,
    pid UInt32,
    started_at DateTime('UTC'),
    heartbeat_at DateTime('UTC'),
    version String,
    _version UInt64
)
ENGINE = {{.Engine "instances" "ReplacingMergeTree(_version)"}}
ORDER BY instance_id
;
{{.Distributed "instances" "cityHash64(instance_id)"}}
;
