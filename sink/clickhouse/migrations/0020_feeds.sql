-- pushed_contacts: the audit of contact feeds (source/feed). One row per
-- state change of a feed row's key: 'intent' is written (durably) before
-- the create-contact call, then 'pushed' (contact_id, survey_url), 'failed'
-- (error: the service's message) or 'uncertain' (the outcome is unknown: an
-- operator must resolve it, docs/feeds.md). The key is the feed's dedupe key
-- (a source column, or 'h:' + a hash of the mapped contact).
--
-- The latest row of a (feed, distribution_id, key) wins: _version is the
-- time of the change in nanoseconds. No PARTITION BY: the intent and the
-- settlement of one key must merge even across a month boundary. Query
-- with FINAL or argMax(…, _version) for exact states before merges, e.g.
--   SELECT key, argMax(state, _version) AS state FROM pushed_contacts
--   WHERE feed = 'crm' GROUP BY distribution_id, key HAVING state = 'uncertain'
CREATE TABLE IF NOT EXISTS {{.Local "pushed_contacts"}}{{.OnCluster}}
(
    feed String,
    key String,
    distribution_id Int64,
    state String,
    contact_id Int64,
    survey_url String,
    error String,
    batch_id String,
    file String,
    line Int64,
    updated_at DateTime('UTC'),
    _version UInt64
)
ENGINE = {{.Engine "pushed_contacts" "ReplacingMergeTree(_version)"}}
ORDER BY (feed, distribution_id, key)
;
{{.Distributed "pushed_contacts" "cityHash64(feed, key)"}}
;
-- message_sends: the sends a feed triggered, one per batch (a file, an HTTP
-- request, a query run) that pushed at least one new contact. 'intent' is
-- written before the call, then 'sent' with the service's contacts_count
-- (pending, sent, bounces), 'failed' or 'uncertain'. contacts is how many
-- new contacts the batch pushed. scheduled_date is NULL for an immediate send.
CREATE TABLE IF NOT EXISTS {{.Local "message_sends"}}{{.OnCluster}}
(
    feed String,
    batch_id String,
    distribution_id Int64,
    message_id Int64,
    state String,
    scheduled_date Nullable(DateTime('UTC')),
    contacts Int64,
    pending Int64,
    sent Int64,
    bounces Int64,
    error String,
    at DateTime('UTC'),
    _version UInt64
)
ENGINE = {{.Engine "message_sends" "ReplacingMergeTree(_version)"}}
ORDER BY (feed, batch_id)
;
{{.Distributed "message_sends" "cityHash64(feed, batch_id)"}}
;
