-- verify_runs: every verification pass, one row per survey × stream
-- (issue 34, docs/schema.md, docs/operations.md "Verification"): what the
-- service listed, what the warehouse held as current, the responses that
-- differed (missing, extra, content) before any repair, what was re-read,
-- and the API calls spent. method is 'counts' (the daemon's pass every
-- verify.interval) or 'reconcile' (the full id comparison every
-- sync.reconcile_interval). pass_result is the survey's whole pass (clean,
-- drift, error): "last verified clean" is its latest 'clean' finished_at.
-- ReplacingMergeTree without a version: a retried insert of the same rows
-- collapses in merges. Partitioned by month for cleanup (ALTER TABLE … DROP
-- PARTITION). Version 0097, off the tens, so that it does not collide with
-- migrations written in parallel.
CREATE TABLE IF NOT EXISTS {{.Local "verify_runs"}}{{.OnCluster}}
(
    survey_id Int64,
    stream String,
    method String,
    started_at DateTime('UTC'),
    finished_at DateTime('UTC'),
    service Int64,
    warehouse Int64,
    missing Int64,
    extra Int64,
    content Int64,
    sampled Int64,
    repaired Int64,
    result String,
    pass_result String,
    error String,
    api_calls Int64
)
ENGINE = {{.Engine "verify_runs" "ReplacingMergeTree()"}}
PARTITION BY toYYYYMM(finished_at)
ORDER BY (survey_id, stream, finished_at, method)
;
{{.Distributed "verify_runs" "cityHash64(survey_id)"}}
;
