-- rejects: the responses surveysync gave up on (issues 12 and 13), one row
-- per rejection: a detail the client could not decode (stage fetch), one
-- that cannot be flattened into rows, e.g. a date outside DateTime's range
-- (flatten), or rows ClickHouse refuses (write). The stream's watermark
-- moves on once the row is written, so a bad response does not pin its
-- stream. response_id is a String: the id itself may be what is wrong.
-- ReplacingMergeTree without a version: a retried insert of the same
-- record collapses in merges. Partitioned by month for easy cleanup
-- (ALTER TABLE … DROP PARTITION).
-- Version 0045, between the tens, so that it does not collide with
-- migrations written in parallel; the order of versions does not matter to
-- this table.
CREATE TABLE IF NOT EXISTS {{.Local "rejects"}}{{.OnCluster}}
(
    survey_id Int64,
    response_id String,
    stage String,
    reason String,
    error String,
    source String,
    rejected_at DateTime('UTC')
)
ENGINE = {{.Engine "rejects" "ReplacingMergeTree()"}}
PARTITION BY toYYYYMM(rejected_at)
ORDER BY (survey_id, response_id, rejected_at, stage, reason)
;
{{.Distributed "rejects" "cityHash64(response_id)"}}
;
