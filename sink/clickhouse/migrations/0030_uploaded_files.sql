-- uploaded_files: the index of the files respondents uploaded, copied into
-- object storage by sink/blob (issue 5, docs/files.md). One row per attempt
-- outcome: a stored file has sha256 set and error empty; a file not stored
-- yet has error set (it is retried); a file of a deleted response has
-- is_deleted = 1. The sorting key is the file, so merges keep its latest
-- version (_version: nanoseconds). Not partitioned: stored_at changes from
-- version to version, and rows of one file must merge.
-- Join to answers_current on (response_id, question_id).
CREATE TABLE IF NOT EXISTS {{.Local "uploaded_files"}}{{.OnCluster}}
(
    file_id UUID,
    response_id UUID,
    survey_id Int64,
    question_id Int64,
    object_url String,
    file_name String,
    size_bytes UInt64,
    sha256 String,
    content_type String,
    stored_at DateTime('UTC'),
    error String,
    attempts UInt32,
    is_deleted UInt8,
    _version UInt64
)
ENGINE = {{.Engine "uploaded_files" "ReplacingMergeTree(_version)"}}
ORDER BY (survey_id, response_id, file_id)
;
{{.Distributed "uploaded_files" "cityHash64(toString(response_id))"}}
;
-- uploaded_files_current: each file once, at its latest version, unless its
-- response was deleted. Files that could not be copied yet are shown with
-- their error (sha256 = ''); stored files have error = ''. Like
-- responses_current it picks the latest row with argMax, so it does not
-- depend on merges.
CREATE VIEW IF NOT EXISTS {{.DB}}.uploaded_files_current{{.OnCluster}} AS
SELECT
    file_id,
    response_id,
    survey_id,
    tupleElement(latest, 1) AS question_id,
    tupleElement(latest, 2) AS object_url,
    tupleElement(latest, 3) AS file_name,
    tupleElement(latest, 4) AS size_bytes,
    tupleElement(latest, 5) AS sha256,
    tupleElement(latest, 6) AS content_type,
    tupleElement(latest, 7) AS stored_at,
    tupleElement(latest, 8) AS error,
    tupleElement(latest, 9) AS attempts,
    latest_version AS _version
FROM
(
    SELECT
        survey_id,
        response_id,
        file_id,
        argMax((question_id, object_url, file_name, size_bytes, sha256, content_type, stored_at, error,
                attempts, is_deleted), _version) AS latest,
        max(_version) AS latest_version
    FROM {{.DB}}.uploaded_files
    GROUP BY survey_id, response_id, file_id
)
WHERE tupleElement(latest, 10) = 0
;
