package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/kvstore"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// FileIndex is the file index used without ClickHouse (files.Index): a
// bbolt database (internal/kvstore) with one entry per file, its key the
// file's key and its value the latest row (the uploaded_files columns) as
// JSON; Record is one transaction, durable when it returns, and keeps the
// newest _version of a file. It is opened once per process and kept in
// memory too.
type FileIndex struct {
	mu     sync.Mutex
	path   string
	db     *bolt.DB
	latest map[string]files.Record
}

var bucketFiles = []byte("files")

type jsonRecord struct {
	FileID      survey.GUID `json:"file_id"`
	ResponseID  survey.GUID `json:"response_id"`
	SurveyID    int64       `json:"survey_id"`
	QuestionID  int64       `json:"question_id"`
	ObjectURL   string      `json:"object_url"`
	FileName    string      `json:"file_name"`
	SizeBytes   int64       `json:"size_bytes"`
	SHA256      string      `json:"sha256"`
	ContentType string      `json:"content_type"`
	StoredAt    time.Time   `json:"stored_at"`
	Error       string      `json:"error"`
	Attempts    int         `json:"attempts"`
	IsDeleted   bool        `json:"is_deleted"`
	Version     uint64      `json:"_version"`
}

func toJSON(r files.Record) jsonRecord {
	return jsonRecord{r.FileID, r.ResponseID, r.SurveyID, r.QuestionID, r.ObjectURL, r.FileName, r.Size, r.SHA256,
		r.ContentType, r.StoredAt.UTC(), r.Error, r.Attempts, r.Deleted, r.Version}
}

func fromJSON(j jsonRecord) files.Record {
	return files.Record{
		FileRef:   files.FileRef{SurveyID: j.SurveyID, ResponseID: j.ResponseID, QuestionID: j.QuestionID, FileID: j.FileID},
		ObjectURL: j.ObjectURL, FileName: j.FileName, ContentType: j.ContentType, Size: j.SizeBytes, SHA256: j.SHA256,
		StoredAt: j.StoredAt, Error: j.Error, Attempts: j.Attempts, Deleted: j.IsDeleted, Version: j.Version,
	}
}

// errEntryDamaged marks an index entry that does not decode.
var errEntryDamaged = errors.New("not the JSON surveysync wrote")

// indexDamaged is the refusal to use a damaged index: erasure and privacy
// apply find the objects to delete through it, so it is not replaced on
// its own.
func indexDamaged(path string, err error) error {
	return fmt.Errorf("%w. The uploaded-files index is how an erasure or a dropped question finds the objects to delete in files.url: "+
		"an empty one would leave the objects of files copied before, so surveysync does not start. Restore it from a backup; or stop "+
		"surveysync, move it aside (mv %s %s.damaged) and start again: files are recorded again as their responses are read again "+
		"(surveysync resync --survey ID reads a survey again), and until then delete the objects of an erased response by hand "+
		"(docs/operations.md, \"Damaged local state\")", err, path, path)
}

// OpenFileIndex opens (creating) the index database at path, e.g.
// <data>/uploaded_files.db. An index of the former format beside it (the
// same name ending in .jsonl: one JSON row per line, appended) is imported
// first, keeping the newest version of each file, and removed.
func OpenFileIndex(path string) (*FileIndex, error) {
	db, err := kvstore.Open(path, "file index")
	if errors.Is(err, kvstore.ErrDamaged) {
		return nil, indexDamaged(path, err)
	}
	if err != nil {
		return nil, err
	}
	ix := &FileIndex{path: path, db: db, latest: map[string]files.Record{}}
	if err := ix.open(); err != nil {
		db.Close()
		err = fmt.Errorf("file index %s: %w", path, err)
		if errors.Is(err, errEntryDamaged) {
			err = indexDamaged(path, err)
		}
		return nil, err
	}
	return ix, nil
}

func (ix *FileIndex) open() error {
	err := ix.db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketFiles, bucketImported} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if former := strings.TrimSuffix(ix.path, filepath.Ext(ix.path)) + ".jsonl"; former != ix.path {
		err := importJSONL(ix.db, former, func(tx *bolt.Tx, line []byte) error {
			var j jsonRecord
			if json.Unmarshal(line, &j) != nil {
				return nil // a line torn by a crash: skip it
			}
			b := tx.Bucket(bucketFiles)
			r := fromJSON(j)
			if prev := b.Get([]byte(r.Key())); prev != nil {
				var p jsonRecord
				if json.Unmarshal(prev, &p) == nil && p.Version > r.Version {
					return nil
				}
			}
			return b.Put([]byte(r.Key()), line)
		})
		if err != nil {
			return err
		}
	}
	return ix.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketFiles).ForEach(func(k, v []byte) error {
			var j jsonRecord
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("entry %q: %w: %w", k, errEntryDamaged, err) // noise inside a value, which bbolt does not checksum
			}
			ix.latest[string(k)] = fromJSON(j)
			return nil
		})
	})
}

// Record stores rows durably; a row older than the file's latest is ignored.
func (ix *FileIndex) Record(ctx context.Context, recs []files.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(toJSON(r))
		if err != nil {
			return fmt.Errorf("file index %s: %s: %w", ix.path, r.Key(), err)
		}
		vals[i] = b
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.db == nil {
		return fmt.Errorf("file index %s: closed", ix.path)
	}
	newer := map[string]files.Record{}
	err := ix.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFiles)
		for i, r := range recs {
			k := r.Key()
			prev, ok := newer[k]
			if !ok {
				prev, ok = ix.latest[k]
			}
			if ok && r.Version < prev.Version {
				continue
			}
			if err := b.Put([]byte(k), vals[i]); err != nil {
				return err
			}
			newer[k] = r
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("file index %s: record %d rows: %w", ix.path, len(recs), err)
	}
	maps.Copy(ix.latest, newer)
	return nil
}

// Pending lists live files not stored yet, oldest attempt first.
func (ix *FileIndex) Pending(ctx context.Context, limit int) ([]files.Record, error) {
	ix.mu.Lock()
	var out []files.Record
	for _, r := range ix.latest {
		if r.Error != "" && !r.Deleted {
			out = append(out, r)
		}
	}
	ix.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].StoredAt.Before(out[j].StoredAt) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// FilesOf returns the latest rows of a response's files.
func (ix *FileIndex) FilesOf(ctx context.Context, surveyID int64, responseID survey.GUID) ([]files.Record, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var out []files.Record
	for _, r := range ix.latest {
		if r.SurveyID == surveyID && r.ResponseID == responseID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].FileID < out[j].FileID })
	return out, nil
}

// Get returns the latest row of a file.
func (ix *FileIndex) Get(ref files.FileRef) (files.Record, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	r, ok := ix.latest[ref.Key()]
	return r, ok
}

// All returns the latest row of every file.
func (ix *FileIndex) All() []files.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]files.Record, 0, len(ix.latest))
	for _, r := range ix.latest {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Close closes the database.
func (ix *FileIndex) Close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.db == nil {
		return nil
	}
	err := ix.db.Close()
	ix.db = nil
	if err != nil {
		return fmt.Errorf("file index %s: %w", ix.path, err)
	}
	return nil
}

var _ files.Index = (*FileIndex)(nil)

// Remove deletes the rows of the files match selects (an erased response's,
// a dropped question's) and compacts the database, so that no free page
// keeps their bytes. It returns how many it removed.
func (ix *FileIndex) Remove(match func(files.Record) bool) (int, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.db == nil {
		return 0, fmt.Errorf("file index %s: closed", ix.path)
	}
	var keys []string
	for k, r := range ix.latest {
		if match(r) {
			keys = append(keys, k)
		}
	}
	err := ix.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFiles)
		for _, k := range keys {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("file index %s: remove %d rows: %w", ix.path, len(keys), err)
	}
	if len(keys) == 0 && !kvstore.HasFreePages(ix.db) {
		return 0, nil // (free pages: a run killed before it compacted)
	}
	for _, k := range keys {
		delete(ix.latest, k)
	}
	db, err := kvstore.Compact(ix.db, ix.path, "file index")
	ix.db = db
	if err != nil {
		return len(keys), err
	}
	return len(keys), nil
}
