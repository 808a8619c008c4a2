-- Cluster mode only (nothing on a single server): the Distributed tables
-- keyed by response_id are re-created with a sharding key every server
-- version can compute. Clusters created before this migration were sharded
-- by cityHash64(response_id), which ClickHouse 18.16 refuses for a UUID
-- ("Unexpected type UUID of argument of function cityHash64", code 43), so
-- every insert into them failed. A Distributed table holds no rows of its
-- own (inserts are synchronous), so dropping it loses nothing; the _local
-- tables and their rows stay. On a cluster created with this version the
-- tables are re-created with the key they already have.
{{.Redistribute "responses" "cityHash64(toString(response_id))"}}
;
{{.Redistribute "answers" "cityHash64(toString(response_id))"}}
;
{{.Redistribute "uploaded_files" "cityHash64(toString(response_id))"}}
