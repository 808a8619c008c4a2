-- erasures: the audit row of every erased response, and its tombstone
-- (issue 23, docs/privacy.md, docs/schema.md). One row per state change:
-- 'started' when the tombstone is written (the pipeline no longer writes
-- the response), 'done' once every row and object is gone; the latest
-- version wins in merges (read with FINAL). It holds no personal data:
-- ids, times, why, and what was removed as "table=rows" counts.
CREATE TABLE IF NOT EXISTS {{.Local "erasures"}}{{.OnCluster}}
(
    survey_id Int64,
    response_id UUID,
    reason String,
    state String,
    requested_at DateTime('UTC'),
    completed_at DateTime('UTC'),
    erased String,
    _version UInt64
)
ENGINE = {{.Engine "erasures" "ReplacingMergeTree(_version)"}}
ORDER BY (survey_id, response_id)
;
{{.Distributed "erasures" "cityHash64(toString(response_id))"}}
