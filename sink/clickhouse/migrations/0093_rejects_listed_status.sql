-- rejects.listed_status (issue 19): the status of the list that showed a
-- response when it was rejected ('' when no list did: a webhook, or a row
-- written before this migration). The poller reads it back after a restart
-- (Sink.RejectedResponses): a rejected response listed at the same status
-- again is unchanged and is not read again, so it adds no new row; listed
-- at another status it is read again.
-- ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: execDDL takes "column
-- already exists" as done, so a re-run after a crash is harmless. In
-- cluster mode the local tables get it, and the Distributed table is
-- re-created over them (it holds no rows; 18.16 refuses an ALTER … ON
-- CLUSTER of a Distributed table when the shards have replicas).
-- Version 0093, after the highest (0085) but off the tens, so that it does
-- not collide with migrations written in parallel.
ALTER TABLE {{.Local "rejects"}}{{.OnCluster}} ADD COLUMN listed_status String AFTER source
;
{{.Redistribute "rejects" "cityHash64(response_id)"}}
;
