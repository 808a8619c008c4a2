-- 0045_rejects.sql
;
CREATE TABLE IF NOT EXISTS surveysync.rejects
(
    survey_id Int64,
    response_id String,
    stage String,
    reason String,
    error String,
    source String,
    rejected_at DateTime('UTC')
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(rejected_at)
ORDER BY (survey_id, response_id, rejected_at, stage, reason)
