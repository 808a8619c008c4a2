-- Core tables (DESIGN §4). Rows are append-only and carry _version (the
-- pipeline's fetch time in nanoseconds); ReplacingMergeTree(_version) keeps,
-- after merges, one row per sorting key: the one with the highest _version.
-- Analysts query the *_current views, which do not depend on merges.
--
-- responses: the sorting key is the response, so merges keep only its latest
-- version; a re-write of the same version collapses too. Partitioned by the
-- month the response was created (stable across versions, never null).
CREATE TABLE IF NOT EXISTS {{.Local "responses"}}{{.OnCluster}}
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
ENGINE = {{.Engine "responses" "ReplacingMergeTree(_version)"}}
PARTITION BY toYYYYMM(date_created)
ORDER BY (survey_id, response_id)
;
{{.Distributed "responses" "cityHash64(toString(response_id))"}}
;
-- answers: _version is part of the sorting key, so the answers of different
-- versions of a response coexist (a newer version may have fewer answers:
-- its rows could not replace the old ones one by one), while a re-write of
-- the same version (a retried batch) collapses row for row. answers_current
-- picks the version that responses says is the latest.
-- Partitioned by the month the response was completed; partial responses
-- (no date_completed) go to the partition 197001.
CREATE TABLE IF NOT EXISTS {{.Local "answers"}}{{.OnCluster}}
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
ENGINE = {{.Engine "answers" "ReplacingMergeTree(_version)"}}
PARTITION BY toYYYYMM(ifNull(date_completed, toDateTime(0, 'UTC')))
ORDER BY (survey_id, response_id, _version, page_index, question_index, answer_index)
;
{{.Distributed "answers" "cityHash64(toString(response_id))"}}
;
-- sync_state: one checkpoint per survey and stream; the latest _version wins.
CREATE TABLE IF NOT EXISTS {{.Local "sync_state"}}{{.OnCluster}}
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
ENGINE = {{.Engine "sync_state" "ReplacingMergeTree(_version)"}}
ORDER BY (survey_id, stream)
;
{{.Distributed "sync_state" "cityHash64(survey_id)"}}
;
-- surveys: what is known about each survey; the latest _version wins.
CREATE TABLE IF NOT EXISTS {{.Local "surveys"}}{{.OnCluster}}
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
ENGINE = {{.Engine "surveys" "ReplacingMergeTree(_version)"}}
ORDER BY survey_id
;
{{.Distributed "surveys" "cityHash64(survey_id)"}}
