-- sync_progress: the cycle in flight of each survey and stream (issue 14),
-- saved every few seconds while a long cycle (a backfill) runs, so that
-- `surveysync status` shows responses written of those listed, the rate and
-- an estimate of the time left. Beside sync_state rather than in it: adding
-- columns to an existing table is not idempotent on the oldest supported
-- servers (no ADD COLUMN IF NOT EXISTS). cycle_started_at is 1970-01-01 when
-- no cycle runs. The latest _version wins.
CREATE TABLE IF NOT EXISTS {{.Local "sync_progress"}}{{.OnCluster}}
(
    survey_id Int64,
    stream String,
    cycle_started_at DateTime('UTC'),
    listed Int64,
    done Int64,
    updated_at DateTime('UTC'),
    _version UInt64
)
ENGINE = {{.Engine "sync_progress" "ReplacingMergeTree(_version)"}}
ORDER BY (survey_id, stream)
;
{{.Distributed "sync_progress" "cityHash64(survey_id)"}}
;
