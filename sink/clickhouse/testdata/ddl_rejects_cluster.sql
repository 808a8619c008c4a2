-- 0045_rejects.sql
;
CREATE TABLE IF NOT EXISTS surveysync.rejects_local ON CLUSTER warehouse
(
    survey_id Int64,
    response_id String,
    stage String,
    reason String,
    error String,
    source String,
    rejected_at DateTime('UTC')
)
ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/surveysync/rejects_local', '{replica}')
PARTITION BY toYYYYMM(rejected_at)
ORDER BY (survey_id, response_id, rejected_at, stage, reason)
;
CREATE TABLE IF NOT EXISTS surveysync.rejects ON CLUSTER warehouse AS surveysync.rejects_local
ENGINE = Distributed(warehouse, surveysync, rejects_local, cityHash64(response_id))
