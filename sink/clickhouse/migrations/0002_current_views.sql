-- The views analysts query (DESIGN §4). They read the public table names
-- and never depend on background merges having happened.
--
-- responses_current: each response once, at its highest _version, and not
-- when that version is a deletion. argMax over a tuple of the columns picks
-- them all from the same (latest) row; filters an analyst adds apply after
-- the latest version is chosen (a FINAL-based view would let ClickHouse 18
-- move such filters before the choice and resurrect old versions).
CREATE VIEW IF NOT EXISTS {{.DB}}.responses_current{{.OnCluster}} AS
SELECT
    response_id,
    survey_id,
    tupleElement(latest, 1) AS survey_name,
    tupleElement(latest, 2) AS distribution_id,
    tupleElement(latest, 3) AS contact_id,
    tupleElement(latest, 4) AS ip_address,
    tupleElement(latest, 5) AS date_created,
    tupleElement(latest, 6) AS date_completed,
    tupleElement(latest, 7) AS total_time,
    tupleElement(latest, 8) AS response_status,
    tupleElement(latest, 9) AS `url_parameters.name`,
    tupleElement(latest, 10) AS `url_parameters.value`,
    tupleElement(latest, 11) AS synced_at,
    latest_version AS _version
FROM
(
    SELECT
        survey_id,
        response_id,
        argMax((survey_name, distribution_id, contact_id, ip_address, date_created, date_completed,
                total_time, response_status, url_parameters.name, url_parameters.value, synced_at,
                is_deleted), _version) AS latest,
        max(_version) AS latest_version
    FROM {{.DB}}.responses
    GROUP BY survey_id, response_id
)
WHERE tupleElement(latest, 12) = 0
;
-- answers_current: the answers of each response's latest, not deleted
-- version. The answers of older versions stay in answers (their _version
-- differs) and are filtered out here; answers written before their
-- responses row (a crash between the two inserts) are not shown either.
-- FINAL collapses rows a retried write inserted twice (same sorting key,
-- same _version, identical content: no filter can pick a different one).
-- The version list reads {{.Local "responses"}}: in cluster mode responses
-- and answers are sharded alike (by response_id), so each shard checks its
-- own rows.
CREATE VIEW IF NOT EXISTS {{.DB}}.answers_current{{.OnCluster}} AS
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
FROM {{.DB}}.answers FINAL
WHERE (response_id, _version) IN
(
    SELECT response_id, latest_version
    FROM
    (
        SELECT response_id, max(_version) AS latest_version, argMax(is_deleted, _version) AS deleted
        FROM {{.Local "responses"}}
        GROUP BY response_id
    )
    WHERE deleted = 0
)
;
-- surveys_current: the latest row of each survey.
CREATE VIEW IF NOT EXISTS {{.DB}}.surveys_current{{.OnCluster}} AS
SELECT
    survey_id,
    tupleElement(latest, 1) AS name,
    tupleElement(latest, 2) AS launched_at,
    tupleElement(latest, 3) AS ended_at,
    tupleElement(latest, 4) AS first_seen,
    tupleElement(latest, 5) AS last_seen,
    tupleElement(latest, 6) AS updated_at
FROM
(
    SELECT survey_id, argMax((name, launched_at, ended_at, first_seen, last_seen, updated_at), _version) AS latest
    FROM {{.DB}}.surveys
    GROUP BY survey_id
)
;
-- sync_state_current: the latest checkpoint of each survey and stream.
CREATE VIEW IF NOT EXISTS {{.DB}}.sync_state_current{{.OnCluster}} AS
SELECT
    survey_id,
    stream,
    tupleElement(latest, 1) AS watermark,
    tupleElement(latest, 2) AS last_run_at,
    tupleElement(latest, 3) AS last_error,
    tupleElement(latest, 4) AS synced,
    tupleElement(latest, 5) AS updated_at
FROM
(
    SELECT survey_id, stream, argMax((watermark, last_run_at, last_error, synced, updated_at), _version) AS latest
    FROM {{.DB}}.sync_state
    GROUP BY survey_id, stream
)
