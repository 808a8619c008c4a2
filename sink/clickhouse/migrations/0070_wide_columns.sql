-- wide_columns: the columns of each survey's wide view survey_<id> (issue
-- 21, docs/schema.md "Wide tables"), one row per question, matrix row or
-- "other" text surveysync has seen in the survey's answers. It is the
-- companion table of the views: the column's name (assigned once and kept,
-- so a view's columns never change name), its type and the question's title,
-- variable and type as last seen. The latest _version wins.
CREATE TABLE IF NOT EXISTS {{.Local "wide_columns"}}{{.OnCluster}}
(
    survey_id Int64,
    question_id Int64,
    row_id Int64,
    part String,
    column_name String,
    column_kind String,
    column_type String,
    question_type String,
    variable String,
    question_title String,
    row_label String,
    page_index UInt16,
    question_index UInt16,
    first_seen DateTime('UTC'),
    _version UInt64
)
ENGINE = {{.Engine "wide_columns" "ReplacingMergeTree(_version)"}}
ORDER BY (survey_id, question_id, row_id, part)
;
{{.Distributed "wide_columns" "cityHash64(survey_id)"}}
;
-- wide_columns_current: each column once, as last written.
CREATE VIEW IF NOT EXISTS {{.DB}}.wide_columns_current{{.OnCluster}} AS
SELECT survey_id, question_id, row_id, part, column_name, column_kind, column_type, question_type, variable,
    question_title, row_label, page_index, question_index, first_seen
FROM {{.DB}}.wide_columns FINAL
;
