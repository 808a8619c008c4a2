package webhookrx

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/kvstore"
)

// recoverDamaged handles a spool database kvstore.Open found damaged
// (damage: its error): bbolt would panic on it, beyond any recover. The
// file is moved aside (spool.db.damaged-<time>) and replaced by a new
// database holding what kvstore.Scan could read on its sound pages: the
// waiting events, done marks and retry counts. The events on the damaged
// pages are lost to the spool, not to the warehouse: polling and
// reconcile fetch their responses.
func (s *spool) recoverDamaged(path string, damage error) error {
	res, err := kvstore.Scan(path, true)
	if err != nil {
		return fmt.Errorf("webhookrx: spool %s cannot be read: %w (check its permissions and the disk; moving it away starts an empty spool)", path, err)
	}
	var de *kvstore.DamagedError
	what := res.Summary()
	if errors.As(damage, &de) {
		what = de.Err.Error()
	}
	aside, err := kvstore.SetAside(path)
	if err != nil {
		return fmt.Errorf("webhookrx: spool %s is damaged (%s) and cannot be moved aside: %w; move or delete it to start with an empty spool", path, what, err)
	}
	db, err := kvstore.Open(path, "webhookrx: spool")
	if err != nil {
		return err
	}
	n, err := restore(db, res)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("webhookrx: spool %s: writing what was read from the damaged file: %w", path, err)
	}
	s.log.Warn("webhook spool: the spool's database is damaged; it was moved aside and a new one started with what could be read. "+
		"Webhook events on the damaged pages are lost from the spool: polling and reconcile fetch their responses (run `surveysync resync` to fetch at once). "+
		"The damaged file is kept for inspection; delete it when done (it may hold webhook bodies)",
		"file", path, "moved_to", aside, "damage", what,
		"events_kept", n.events, "events_unreadable", n.badEvents, "done_marks_kept", n.done, "events_bucket_damaged", n.eventsDamaged)
	return nil
}

type restored struct {
	events, badEvents, done int
	eventsDamaged           bool
}

// restore writes the salvaged buckets into db, a new database, in one
// transaction. The events' sequence goes on from the highest sequence
// number found (in the bucket's header or in an event or done mark), so
// that new events sort after the salvaged ones.
func restore(db *bolt.DB, res *kvstore.ScanResult) (restored, error) {
	var n restored
	err := db.Update(func(tx *bolt.Tx) error {
		var maxSeq uint64
		for _, name := range [][]byte{bucketEvents, bucketDone, bucketRetries, bucketMeta} {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			sb := res.Buckets[string(name)]
			if sb == nil {
				if string(name) == string(bucketEvents) {
					n.eventsDamaged = true
				}
				continue
			}
			seq := sb.Sequence
			for _, kv := range sb.Entries {
				seq = max(seq, kvstore.Uint(kv.Key))
				switch string(name) {
				case string(bucketEvents):
					es := kvstore.Uint(kv.Key)
					if _, err := decodeEvent(es, kv.Value, false); err != nil || es == 0 {
						n.badEvents++
						continue
					}
					maxSeq = max(maxSeq, es)
					n.events++
				case string(bucketDone):
					m, ok := decodeDone(kv.Value)
					if !ok {
						continue
					}
					maxSeq = max(maxSeq, m.seq)
					n.done++
				}
				if err := b.Put(kv.Key, kv.Value); err != nil {
					return err
				}
			}
			switch string(name) {
			case string(bucketEvents):
				n.eventsDamaged = sb.Damaged
				maxSeq = max(maxSeq, sb.Sequence)
			default:
				if err := b.SetSequence(seq); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketEvents).SetSequence(maxSeq)
	})
	return n, err
}
