// Package webhookrx receives the survey service's webhooks, spools them
// durably and processes them (docs/api.md section 11, "Webhooks, as the service sends
// them"; docs/webhooks.md).
//
// The service POSTs a flat JSON body to one URL per account, unsigned, and
// tries 6 times over a day. So the receiver answers fast and only once the
// event is safe on disk:
//
//	request → source allow-list (403) → secret path (404) → POST (405) →
//	basic auth (401) → size (413) → Standard Webhooks signature if sent (401) →
//	JSON and the event's required fields (400) → dedupe → spool cap (503) →
//	one bbolt transaction committed with fdatasync (group commit) → 200
//
// Spooled events are processed by Options.ProcessConcurrency workers through
// a Processor (the lead's pipeline adapter in cmd), one attempt per turn:
// an event whose Process fails transiently goes back to the spool loop and
// does not hold its worker; its survey is gated and probed with one event
// per backoff while other surveys' events flow (feeder.go). An error
// permanent.Is reports (internal/permanent) ends the event as rejected. Done events are written
// to the raw EventLog (table webhook_events), then marked done: deleted
// from the spool's database (SpoolDir/spool.db, go.etcd.io/bbolt) in the
// transaction that adds them to the dedupe window. At start the events left
// in the spool are queued again in spool order (a spool of the former
// log format is imported first, legacy.go). Only the events handed to the
// workers keep their bodies in memory (Options.SpoolMemoryBytes); the
// others are read back from the database.
//
// Delivery is at least once: a crash between a Process returning nil and
// the done mark being synced processes that event again at the next start.
// The pipeline's writes are idempotent (ReplacingMergeTree by version), so
// this, and two receivers behind one URL, still give one row per response.
//
// Dedupe: an event's id is the webhook-id header, else the SHA-256 of the
// body. A delivery whose id is waiting in the spool, or among the last
// Options.DedupeIDs processed ids (kept in the database across restarts), is
// acknowledged with 200 and not processed again.
package webhookrx
