-- privacy_rules: the privacy rules in effect when the data was written
-- (issue 23, docs/privacy.md "Changing the rules on an existing
-- warehouse"). The daemon compares them with its configuration at start:
-- stricter rules wait for surveysync privacy apply, which rewrites the data
-- and then records them. rules is the JSON of every action and a keyed
-- fingerprint of the hash key (never the key). One row per recording; the
-- latest _version wins (read with FINAL).
CREATE TABLE IF NOT EXISTS {{.Local "privacy_rules"}}{{.OnCluster}}
(
    id String,
    rules String,
    recorded_at DateTime('UTC'),
    _version UInt64
)
ENGINE = {{.Engine "privacy_rules" "ReplacingMergeTree(_version)"}}
ORDER BY id
;
{{.Distributed "privacy_rules" "cityHash64(id)"}}
