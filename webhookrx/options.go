package webhookrx

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/survey"
)

// Options configure a Receiver. Zero values take the defaults documented on
// each field; Path and SpoolDir are required.
type Options struct {
	// Listen is the address the HTTP server listens on (":8081",
	// "127.0.0.1:0"). Empty: Run serves no HTTP itself; mount Handler()
	// elsewhere.
	Listen string
	// Path is the one path that accepts webhooks; it should contain a secret
	// ("/webhooks/3f9c…"). It is never logged.
	Path string
	// BasicAuthUser and BasicAuthPassword, when the user is set, require HTTP
	// basic auth (401 otherwise).
	BasicAuthUser     string
	BasicAuthPassword string
	// AllowCIDRs, when set, restricts the source address of the TCP
	// connection (not X-Forwarded-For) to these networks (403 otherwise).
	AllowCIDRs []string
	// StandardWebhooksSecret, when set, requires the Standard Webhooks
	// headers (webhook-id, webhook-timestamp, webhook-signature) on every
	// request and verifies them (401 otherwise). "whsec_<base64>" is
	// decoded; any other value is used as the raw key. The key must be at
	// least MinSecretBytes long.
	StandardWebhooksSecret string
	// AllowUnsigned, with a secret, still accepts requests that carry no
	// signature headers at all (those that carry them are verified): the
	// former default, kept for senders that sign only some requests. It
	// weakens the secret to nothing against a sender that omits the
	// headers (the daemon warns at start). Without a secret it changes
	// nothing.
	AllowUnsigned bool
	// SignatureTolerance bounds the age (and future skew) of
	// webhook-timestamp. Default 5 min.
	SignatureTolerance time.Duration
	// MaxBodyBytes bounds a request body (413 beyond). Default 1 MiB.
	MaxBodyBytes int64
	// MaxConns caps the open connections of the Listen server; past it new
	// connections wait in the kernel's backlog, so slow or idle clients
	// cannot exhaust the process's file descriptors. Default 1 024. The
	// server also bounds reading headers (10 s), a whole request (30 s),
	// writing the answer (30 s) and idle keep-alive connections (2 min).
	MaxConns int

	// SpoolDir holds the durable spool. Required. One process at a time:
	// Run takes an exclusive lock on SpoolDir/lock.
	SpoolDir string
	// SpoolMaxEvents and SpoolMaxBytes cap the events waiting in the spool;
	// past either cap the receiver answers 503 with Retry-After. Defaults
	// 100 000 events and 256 MiB.
	SpoolMaxEvents int
	SpoolMaxBytes  int64
	// SpoolMemoryBytes bounds the bodies of spooled events held in memory:
	// those handed to the workers (queued or being processed). The other
	// waiting events are kept as small index entries and read back from
	// the spool's database when their turn comes. Default 16 MiB; at least one
	// event is always handed out.
	SpoolMemoryBytes int64
	// SegmentBytes bounds the bodies of one group commit (the name is the
	// former segmented log's). Default 4 MiB.
	SegmentBytes int64
	// DedupeIDs is how many processed event ids are remembered (in memory
	// and in the spool's database) to acknowledge redeliveries without
	// processing them again. Default 100 000.
	DedupeIDs int
	// RetryAfter is the Retry-After sent with a 503. Default 60 s.
	RetryAfter time.Duration

	// Redact, when set, rewrites a webhook body after it is checked and its
	// id taken (the SHA-256 of the body as received, when it has no
	// webhook-id), before it is spooled: what the spool's file, the
	// Processor and the EventLog get. The daemon passes the privacy field
	// rules (a contact id hashed or dropped never reaches the file). It
	// must keep what parseEvent needs (event_name, survey_id,
	// response_id) and be idempotent.
	Redact func(body []byte) []byte
	// RedactRules names the rules Redact applies (any text that changes
	// with them): when it differs from the one the spool recorded, the
	// waiting events' bodies are rewritten at start and the file compacted.
	RedactRules string
	// Erased, when set, reports whether a response is erased: a webhook
	// about one is acknowledged (as a duplicate) and not spooled, and the
	// waiting events of a response erased later are deleted at start and
	// on Scrub. With Erased or Redact set, the spool's file is rewritten
	// without its free pages (where bbolt keeps deleted values) at start,
	// and after Scrub.
	Erased func(surveyID int64, responseID survey.GUID) bool

	// Logger receives operational logs. Default: discard.
	Logger *slog.Logger
	// Registerer receives the metrics. Nil: metrics are kept but not exported.
	Registerer prometheus.Registerer

	// ProcessConcurrency is how many events are processed at once (started
	// in spool order). Default 256: a Process call that waits for its
	// pipeline batch to be flushed (up to the batch delay) holds a worker
	// that long, so throughput is about ProcessConcurrency / batch delay;
	// concurrent calls share one batch. With 1, events are processed in
	// order, except that an event whose Process failed is retried after
	// the events behind it.
	ProcessConcurrency int
	// RetryInitial and RetryMax bound the backoffs of failing events
	// (doubling, with jitter): the gate of a survey whose events fail
	// transiently (per failure in a row), and an event's own retries (per
	// attempt). Defaults 500 ms and 1 min.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// LogBatch and LogInterval batch writes to the EventLog. Defaults 1 000
	// events and 500 ms.
	LogBatch    int
	LogInterval time.Duration
	// ShutdownTimeout bounds the HTTP server shutdown and the time in-flight
	// Process calls get to finish once Run's context is done; after it they
	// are cancelled and their events stay in the spool. Default 10 s.
	ShutdownTimeout time.Duration

	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// MinSecretBytes is the shortest Standard Webhooks key accepted (decoded,
// for a "whsec_" secret): 128 bits.
const MinSecretBytes = 16

// Defaults of the options that config also defaults (webhooks.*).
const (
	DefaultSignatureTolerance       = 5 * time.Minute
	DefaultMaxBodyBytes       int64 = 1 << 20
	DefaultSpoolMaxEvents           = 100_000
	DefaultSpoolMaxBytes      int64 = 256 << 20
	defaultDedupeIDs                = 100_000
)

// setDefaults gives zero fields their defaults (resolve has refused
// negative sizes and counts).
func (o *Options) setDefaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxBodyBytes, DefaultMaxBodyBytes)
	defInt(&o.MaxConns, 1024)
	defInt(&o.SpoolMaxEvents, DefaultSpoolMaxEvents)
	def(&o.SpoolMaxBytes, DefaultSpoolMaxBytes)
	def(&o.SegmentBytes, 4<<20)
	def(&o.SpoolMemoryBytes, 16<<20)
	defInt(&o.DedupeIDs, defaultDedupeIDs)
	defInt(&o.ProcessConcurrency, 256)
	defInt(&o.LogBatch, 1000)
	defDur(&o.SignatureTolerance, DefaultSignatureTolerance)
	defDur(&o.RetryAfter, time.Minute)
	defDur(&o.RetryInitial, 500*time.Millisecond)
	defDur(&o.RetryMax, time.Minute)
	defDur(&o.LogInterval, 500*time.Millisecond)
	defDur(&o.ShutdownTimeout, 10*time.Second)
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = o.RetryInitial
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// settings are Options after defaults and parsing.
type settings struct {
	Options
	allow  []netip.Prefix
	swKey  []byte
	logger *slog.Logger
}

func (o Options) resolve() (*settings, error) {
	var errs []error
	if o.Path == "" || !strings.HasPrefix(o.Path, "/") {
		errs = append(errs, errors.New("webhookrx: path: must be set and start with '/' (and contain a secret)"))
	}
	if o.SpoolDir == "" {
		errs = append(errs, errors.New("webhookrx: spool_dir: required"))
	}
	if o.BasicAuthUser == "" && o.BasicAuthPassword != "" {
		errs = append(errs, errors.New("webhookrx: basic auth: password set without a user"))
	}
	if o.MaxBodyBytes < 0 || o.SpoolMaxEvents < 0 || o.SpoolMaxBytes < 0 || o.ProcessConcurrency < 0 || o.DedupeIDs < 0 || o.MaxConns < 0 || o.SpoolMemoryBytes < 0 {
		errs = append(errs, errors.New("webhookrx: sizes and counts must not be negative"))
	}
	s := &settings{Options: o}
	for _, c := range o.AllowCIDRs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			// A bare address means a single host.
			a, aerr := netip.ParseAddr(strings.TrimSpace(c))
			if aerr != nil {
				errs = append(errs, fmt.Errorf("webhookrx: allow_cidrs: %q is neither a CIDR nor an address", c))
				continue
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		s.allow = append(s.allow, p.Masked())
	}
	if sec := o.StandardWebhooksSecret; sec != "" {
		if b64, ok := strings.CutPrefix(sec, "whsec_"); ok {
			k, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				errs = append(errs, errors.New("webhookrx: standard webhooks secret: 'whsec_' prefix but the rest is not base64"))
			}
			s.swKey = k
		} else {
			s.swKey = []byte(sec)
		}
		if len(s.swKey) < MinSecretBytes && len(errs) == 0 {
			errs = append(errs, fmt.Errorf("webhookrx: standard webhooks secret: the key is %d bytes, fewer than %d", len(s.swKey), MinSecretBytes))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.setDefaults()
	s.logger = o.Logger
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s, nil
}
