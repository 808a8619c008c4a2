package daemon

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/pipeline/privacy"
	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// newPolicy maps privacy: onto pipeline/privacy; nil when it keeps
// everything. The key is read here (from the file or the variable) and
// goes nowhere else.
func newPolicy(cfg *config.Config) (*privacy.Policy, error) {
	if !cfg.Privacy.Enabled() {
		return nil, nil
	}
	o, err := policyOptions(cfg)
	if err != nil {
		return nil, err
	}
	p, err := privacy.New(o)
	if err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	return p, nil
}

// policyOptions are the privacy: rules as pipeline/privacy takes them,
// with the key when a rule hashes.
func policyOptions(cfg *config.Config) (privacy.Options, error) {
	pc := cfg.Privacy
	o := privacy.Options{
		IPAddress:      privacy.Action(pc.Fields.IPAddress),
		ContactID:      privacy.Action(pc.Fields.ContactID),
		DistributionID: privacy.Action(pc.Fields.DistributionID),
		URLParameters:  map[string]privacy.Action{},
		TypeMatch:      cfg.Files.TypeMatch,
	}
	for name, a := range pc.Fields.URLParameters {
		o.URLParameters[name] = privacy.Action(a)
	}
	for _, q := range pc.Questions {
		o.Questions = append(o.Questions, privacy.Rule{Survey: q.Survey, Question: q.Question, Variable: q.Variable, Type: q.Type, Action: privacy.Action(q.Action)})
	}
	if pc.UsesHash() {
		k, err := pc.Key()
		if err != nil {
			return o, err
		}
		o.Key = k
	}
	return o, nil
}

// privateWarehouse applies the policy to what the warehouse's webhook log
// and feed ledger store; the responses reach it already transformed (the
// pipeline's fetcher applies the policy).
type privateWarehouse struct {
	warehouse.Warehouse
	p *privacy.Policy
}

func withPrivacy(wh warehouse.Warehouse, p *privacy.Policy) warehouse.Warehouse {
	if !p.Enabled() {
		return wh
	}
	return privateWarehouse{wh, p}
}

func (w privateWarehouse) WebhookLog() record.WebhookLog {
	l := w.Warehouse.WebhookLog()
	if l == nil {
		return nil
	}
	// The receiver applied the rules before spooling the body already:
	// applied again, a value already hashed stays as it is.
	return privateWebhookLog{l, w.p.Idempotent()}
}

func (w privateWarehouse) FeedLedger() (record.FeedLedger, error) {
	l, err := w.Warehouse.FeedLedger()
	if err != nil || l == nil || (!w.p.HashesContactID() && !w.p.DropsContactID()) {
		return l, err
	}
	return privateLedger{l, w.p}, nil
}

// privateWebhookLog stores webhook bodies with the field rules applied.
type privateWebhookLog struct {
	record.WebhookLog
	p *privacy.Policy
}

func (l privateWebhookLog) LogEvents(ctx context.Context, events []record.WebhookEvent) error {
	out := make([]record.WebhookEvent, len(events))
	for i, e := range events {
		e.Body = string(l.p.WebhookBody([]byte(e.Body)))
		out[i] = e
	}
	return l.WebhookLog.LogEvents(ctx, out)
}

// privateLedger stores the contact ids feeds pushed as the responses hold
// them: hashed into ContactIDHash (so pushed_contacts joins
// responses.contact_id_hash) or not at all.
type privateLedger struct {
	record.FeedLedger
	p *privacy.Policy
}

func (l privateLedger) RecordContacts(ctx context.Context, entries []record.ContactEntry) error {
	out := make([]record.ContactEntry, len(entries))
	for i, e := range entries {
		if e.ContactID != 0 && l.p.HashesContactID() {
			e.ContactIDHash = l.p.HashInt(e.ContactID)
		}
		e.ContactID = 0
		out[i] = e
	}
	return l.FeedLedger.RecordContacts(ctx, out)
}
