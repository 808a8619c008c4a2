CREATE DATABASE IF NOT EXISTS surveysync
;
CREATE TABLE IF NOT EXISTS surveysync.schema_migrations
(
    version UInt32,
    name String,
    applied_at DateTime('UTC')
)
ENGINE = ReplacingMergeTree(applied_at)
ORDER BY version
;
CREATE TABLE IF NOT EXISTS surveysync.migration_lock
(
    holder String,
    host String,
    pid UInt32,
    heartbeat_at DateTime('UTC'),
    released UInt8
)
ENGINE = MergeTree
ORDER BY (holder, heartbeat_at)
;
-- 0001_core_tables.sql
;
CREATE TABLE IF NOT EXISTS surveysync.responses
(
    response_id UUID,
    survey_id Int64,
    survey_name String,
    distribution_id Nullable(Int64),
    contact_id Nullable(Int64),
    ip_address String,
    date_created DateTime('UTC'),
    date_completed Nullable(DateTime('UTC')),
    total_time Nullable(Int64),
    response_status String,
    url_parameters Nested(name String, value String),
    is_deleted UInt8,
    synced_at DateTime('UTC'),
    _version UInt64
)
ENGINE = ReplacingMergeTree(_version)
PARTITION BY toYYYYMM(date_created)
ORDER BY (survey_id, response_id)
;
CREATE TABLE IF NOT EXISTS surveysync.answers
(
    response_id UUID,
    survey_id Int64,
    page_id Int64,
    page_index UInt16,
    question_id Int64,
    question_index UInt16,
    question_type String,
    question_title String,
    variable String,
    answer_index UInt16,
    row_id Nullable(Int64),
    row_label String,
    column_id Nullable(Int64),
    column_label String,
    choice_id Nullable(Int64),
    choice_label String,
    other_id Nullable(Int64),
    text String,
    value Nullable(Int64),
    response_status String,
    date_completed Nullable(DateTime('UTC')),
    _version UInt64
)
ENGINE = ReplacingMergeTree(_version)
PARTITION BY toYYYYMM(ifNull(date_completed, toDateTime(0, 'UTC')))
ORDER BY (survey_id, response_id, _version, page_index, question_index, answer_index)
;
CREATE TABLE IF NOT EXISTS surveysync.sync_state
(
    survey_id Int64,
    stream String,
    watermark DateTime('UTC'),
    last_run_at DateTime('UTC'),
    last_error String,
    synced Int64,
    updated_at DateTime('UTC'),
    _version UInt64
)
ENGINE = ReplacingMergeTree(_version)
ORDER BY (survey_id, stream)
;
CREATE TABLE IF NOT EXISTS surveysync.surveys
(
    survey_id Int64,
    name String,
    launched_at Nullable(DateTime('UTC')),
    ended_at Nullable(DateTime('UTC')),
    first_seen DateTime('UTC'),
    last_seen DateTime('UTC'),
    updated_at DateTime('UTC'),
    _version UInt64
)
ENGINE = ReplacingMergeTree(_version)
ORDER BY survey_id
;
-- 0002_current_views.sql
;
CREATE VIEW IF NOT EXISTS surveysync.responses_current AS
SELECT
    response_id,
    survey_id,
    survey_name,
    distribution_id,
    contact_id,
    ip_address,
    date_created,
    date_completed,
    total_time,
    response_status,
    url_parameters.name,
    url_parameters.value,
    synced_at,
    _version
FROM
(
    SELECT *
    FROM surveysync.responses FINAL
)
WHERE is_deleted = 0
;
CREATE VIEW IF NOT EXISTS surveysync.answers_current AS
SELECT
    response_id,
    survey_id,
    page_id,
    page_index,
    question_id,
    question_index,
    question_type,
    question_title,
    variable,
    answer_index,
    row_id,
    row_label,
    column_id,
    column_label,
    choice_id,
    choice_label,
    other_id,
    text,
    value,
    response_status,
    date_completed,
    _version
FROM surveysync.answers FINAL
WHERE (response_id, _version) IN
(
    SELECT response_id, _version
    FROM
    (
        SELECT response_id, _version, is_deleted
        FROM surveysync.responses FINAL
    )
    WHERE is_deleted = 0
)
;
CREATE VIEW IF NOT EXISTS surveysync.surveys_current AS
SELECT survey_id, name, launched_at, ended_at, first_seen, last_seen, updated_at
FROM surveysync.surveys FINAL
;
CREATE VIEW IF NOT EXISTS surveysync.sync_state_current AS
SELECT survey_id, stream, watermark, last_run_at, last_error, synced, updated_at
FROM surveysync.sync_state FINAL
