-- webhook_events: the raw log of the webhooks the receiver (webhookrx) kept
-- and processed, one row per event, with the body exactly as received.
-- Unknown event names are kept here too (outcome 'ignored').
--
-- event_id is the webhook-id header, else the SHA-256 of the body. After a
-- crash an event can be processed and logged again: the sorting key is the
-- event (its survey, name and id), so merges keep one row per event, the one
-- with the highest _version (the log time in nanoseconds); query with FINAL
-- or argMax(…, _version) for an exact count before merges.
-- response_id is Nullable (events other than response_received have none)
-- and so stays out of ORDER BY. received_at is a property of the event (the
-- spool keeps it), so a re-log lands in the same monthly partition.
CREATE TABLE IF NOT EXISTS {{.Local "webhook_events"}}{{.OnCluster}}
(
    event_id String,
    event_name String,
    survey_id Int64,
    response_id Nullable(UUID),
    received_at DateTime('UTC'),
    processed_at DateTime('UTC'),
    outcome String,
    error String,
    attempts UInt32,
    body String,
    _version UInt64
)
ENGINE = {{.Engine "webhook_events" "ReplacingMergeTree(_version)"}}
PARTITION BY toYYYYMM(received_at)
ORDER BY (survey_id, event_name, event_id)
;
{{.Distributed "webhook_events" "cityHash64(event_id)"}}
;
