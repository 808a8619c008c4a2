// Package surveyapi is the client of the survey service's v1 API (docs/api.md §4):
// create contact, send message, list responses, get a response, download an
// uploaded file, and a cheap token check (Ping). One *Client is shared by
// every caller of the process, because the limits it enforces are the
// process's:
//
//   - a token bucket (Options.RateLimit, burst 1) and a concurrency cap
//     (Options.MaxConcurrency) that every request passes;
//   - adaptive concurrency (AIMD): the cap halves on a 429 and creeps back by
//     one slot per "limit" successes;
//   - a shared "not before" gate: after a 429 nobody sends until its
//     Retry-After (or backoff) has passed;
//   - a 402 pause: every call waits Options.QuotaPause, then one probe goes
//     first and the others follow when it succeeds;
//   - a 401 stop: calls fail fast with ErrUnauthorized; one probe per minute
//     checks whether the token was fixed (Healthy, LastAuthError).
//
// Status policy (docs/api.md §7): 400/405 and other 4xx, 403, 404 are final
// (*APIError; 404 matches survey.ErrNotFound); 429, 5xx, timeouts and
// connection failures are retried with internal/backoff (exponential, equal jitter),
// at most Options.MaxRetries times, honouring Retry-After. Create contact
// and send message are not idempotent: they are retried only when the
// service answered (429, 5xx) or the request was never written (connection
// refused); after a timeout or reset of a sent request the error matches
// ErrUncertain and nothing is retried. Context cancellation ends every wait
// at once.
//
// Requests go through net/http (keep-alive, gzip, TLS, proxies from the
// environment). JSON bodies are read under a byte budget shared by every
// request in flight (Options.BodyBudget; one body at most Options.MaxBody,
// 64 MiB) and decoded with encoding/json in one pass into the survey
// package's types; every envelope spelling the service uses is accepted
// (meta.requestId/request_id, http_status/status_code, result missing where
// nothing is returned). Unusable bodies match ErrMalformed, are marked
// permanent (internal/permanent, reasons "decode", "bad_date", "bad_guid",
// "too_large") and name the operation, the survey and response asked for,
// and the request id.
//
// The API token is sent as X-API-TOKEN and nowhere else: it never appears
// in errors, logs or metrics (text from the service is scrubbed of it, and
// redirects are refused so the header cannot travel elsewhere).
//
// Metrics (all on Options.Registerer): surveysync_api_requests_total
// {operation,outcome}, surveysync_api_request_duration_seconds{operation},
// surveysync_api_retries_total{operation,reason},
// surveysync_api_rate_limit_wait_seconds_total,
// surveysync_api_concurrency_wait_seconds_total,
// surveysync_api_concurrency_limit, surveysync_api_in_flight,
// surveysync_api_paused, surveysync_api_auth_failed,
// surveysync_api_pauses_total{reason}, surveysync_api_calls_month.
// docs/client.md has the details.
package surveyapi
