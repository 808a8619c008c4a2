-- Privacy (issue 23, docs/privacy.md): with privacy.fields.contact_id: hash
-- the contact id is stored as the lowercase hex of its keyed HMAC-SHA-256
-- in contact_id_hash (contact_id stays NULL in responses, 0 in
-- pushed_contacts), so responses still join pushed contacts. '' when the
-- id is kept or dropped.
-- ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: execDDL takes "column
-- already exists" as done, so a re-run after a crash is harmless. In
-- cluster mode the local tables get it, and the Distributed tables are
-- re-created over them (they hold no rows; ClickHouse 18.16 refuses an
-- ALTER … ON CLUSTER of a Distributed table when the shards have replicas).
ALTER TABLE {{.Local "responses"}}{{.OnCluster}} ADD COLUMN contact_id_hash String AFTER contact_id
;
{{.Redistribute "responses" "cityHash64(toString(response_id))"}}
;
ALTER TABLE {{.Local "pushed_contacts"}}{{.OnCluster}} ADD COLUMN contact_id_hash String AFTER contact_id
;
{{.Redistribute "pushed_contacts" "cityHash64(feed, key)"}}
;
-- responses_current lists its columns: it is created again with the new
-- one (a view holds no data).
DROP TABLE IF EXISTS {{.DB}}.responses_current{{.OnCluster}}
;
CREATE VIEW IF NOT EXISTS {{.DB}}.responses_current{{.OnCluster}} AS
SELECT
    response_id,
    survey_id,
    survey_name,
    distribution_id,
    contact_id,
    contact_id_hash,
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
    FROM {{.DB}}.responses FINAL
)
WHERE is_deleted = 0
;
