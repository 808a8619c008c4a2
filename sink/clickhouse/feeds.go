package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/surveysync/surveysync/record"
)

// FeedLedger is the feed ledger in ClickHouse: tables pushed_contacts and
// message_sends (migration 0020). Each Record call is one INSERT; it returns
// once the server has acknowledged it. Loads read the latest state per key
// with argMax(…, _version), so they are exact before merges; 100k keys load
// in well under a second.
type FeedLedger struct{ s *Sink }

var _ record.FeedLedger = (*FeedLedger)(nil)

// NewFeedLedger returns the feed ledger on s.
func NewFeedLedger(s *Sink) *FeedLedger { return &FeedLedger{s: s} }

// RecordContacts appends entries in one insert.
func (l *FeedLedger) RecordContacts(ctx context.Context, entries []record.ContactEntry) error {
	if len(entries) == 0 {
		return nil
	}
	s := l.s
	table := s.table("pushed_contacts")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (feed, key, distribution_id, state, contact_id, contact_id_hash, survey_url, error, batch_id, file, line, updated_at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: record feed rows into %s: %w", table, err)
	}
	defer batch.Close()
	for _, e := range entries {
		at := e.UpdatedAt
		if at.IsZero() {
			at = time.Now()
		}
		v := e.Version
		if v == 0 {
			v = s.nextVersion()
		}
		if err := batch.Append(e.Feed, e.Key, e.DistributionID, e.State, e.ContactID, e.ContactIDHash, e.SurveyURL, e.Error,
			e.BatchID, e.File, e.Line, at.UTC(), v); err != nil {
			return fmt.Errorf("clickhouse: record feed rows into %s: key %s: %w", table, e.Key, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: record feed rows into %s: %w", table, err)
	}
	return nil
}

// LoadContacts calls fn with the latest entry of every key of feedName.
func (l *FeedLedger) LoadContacts(ctx context.Context, feedName string, fn func(record.ContactEntry) error) error {
	s := l.s
	table := s.table("pushed_contacts")
	rows, err := s.Conn().Query(ctx, "SELECT key, distribution_id, argMax(state, _version), argMax(contact_id, _version), argMax(contact_id_hash, _version),"+
		" argMax(survey_url, _version), argMax(error, _version), argMax(batch_id, _version), argMax(file, _version),"+
		" argMax(line, _version), max(updated_at), max(_version)"+
		" FROM "+table+" WHERE feed = ? GROUP BY distribution_id, key", feedName)
	if err != nil {
		return fmt.Errorf("clickhouse: load feed rows from %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		e := record.ContactEntry{Feed: feedName}
		if err := rows.Scan(&e.Key, &e.DistributionID, &e.State, &e.ContactID, &e.ContactIDHash, &e.SurveyURL, &e.Error,
			&e.BatchID, &e.File, &e.Line, &e.UpdatedAt, &e.Version); err != nil {
			return fmt.Errorf("clickhouse: load feed rows from %s: %w", table, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: load feed rows from %s: %w", table, err)
	}
	return nil
}

// RecordSend appends one send entry.
func (l *FeedLedger) RecordSend(ctx context.Context, e record.SendEntry) error {
	s := l.s
	table := s.table("message_sends")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (feed, batch_id, distribution_id, message_id, state, scheduled_date, contacts, pending, sent, bounces, error, at, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: record feed send into %s: %w", table, err)
	}
	defer batch.Close()
	var sched *time.Time
	if e.ScheduledDate != nil {
		t := e.ScheduledDate.UTC()
		sched = &t
	}
	at := e.At
	if at.IsZero() {
		at = time.Now()
	}
	v := e.Version
	if v == 0 {
		v = s.nextVersion()
	}
	if err := batch.Append(e.Feed, e.BatchID, e.DistributionID, e.MessageID, e.State, sched, e.Contacts,
		e.Pending, e.Sent, e.Bounces, e.Error, at.UTC(), v); err != nil {
		return fmt.Errorf("clickhouse: record feed send into %s: %w", table, err)
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: record feed send into %s: %w", table, err)
	}
	return nil
}

// LoadSends calls fn with the latest entry of every batch of feedName.
func (l *FeedLedger) LoadSends(ctx context.Context, feedName string, fn func(record.SendEntry) error) error {
	s := l.s
	table := s.table("message_sends")
	rows, err := s.Conn().Query(ctx, "SELECT batch_id, argMax(distribution_id, _version), argMax(message_id, _version),"+
		" argMax(state, _version), argMax(scheduled_date, _version), argMax(contacts, _version), argMax(pending, _version),"+
		" argMax(sent, _version), argMax(bounces, _version), argMax(error, _version), max(at), max(_version)"+
		" FROM "+table+" WHERE feed = ? GROUP BY batch_id", feedName)
	if err != nil {
		return fmt.Errorf("clickhouse: load feed sends from %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		e := record.SendEntry{Feed: feedName}
		if err := rows.Scan(&e.BatchID, &e.DistributionID, &e.MessageID, &e.State, &e.ScheduledDate, &e.Contacts,
			&e.Pending, &e.Sent, &e.Bounces, &e.Error, &e.At, &e.Version); err != nil {
			return fmt.Errorf("clickhouse: load feed sends from %s: %w", table, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: load feed sends from %s: %w", table, err)
	}
	return nil
}
