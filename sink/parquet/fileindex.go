package parquet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// JSONLIndex is the file index used without ClickHouse: one JSON object per
// line (the uploaded_files columns), appended and fsynced by Record; the
// newest _version of a file wins when the file is read back. It is opened
// once per process and kept in memory.
type JSONLIndex struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	latest map[string]files.Record
}

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

// OpenJSONLIndex opens (creating) the index file at path, e.g.
// <data>/uploaded_files.jsonl. A file with many superseded versions is
// compacted on open (rewritten atomically).
func OpenJSONLIndex(path string) (*JSONLIndex, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("file index %s: %w", path, err)
	}
	ix := &JSONLIndex{path: path, latest: map[string]files.Record{}}
	lines := 0
	if f, err := os.Open(path); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var j jsonRecord
			if len(sc.Bytes()) == 0 {
				continue
			}
			if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
				continue // a line torn by a crash: skip it
			}
			lines++
			r := fromJSON(j)
			if prev, ok := ix.latest[r.Key()]; !ok || r.Version >= prev.Version {
				ix.latest[r.Key()] = r
			}
		}
		err := sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("file index %s: %w", path, err)
		}
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("file index %s: %w", path, err)
	}
	if lines > 2*len(ix.latest)+1000 {
		if err := ix.compact(); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("file index %s: %w", path, err)
	}
	ix.f = f
	return ix, nil
}

func (ix *JSONLIndex) compact() error {
	err := atomicfile.Write(ix.path, 0o640, func(f *os.File) error {
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		for _, r := range ix.latest {
			if err := enc.Encode(toJSON(r)); err != nil {
				return err
			}
		}
		return w.Flush()
	})
	if err != nil {
		return fmt.Errorf("compact file index %s: %w", ix.path, err)
	}
	return nil
}

// Record appends rows and fsyncs.
func (ix *JSONLIndex) Record(ctx context.Context, recs []files.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf []byte
	for _, r := range recs {
		b, err := json.Marshal(toJSON(r))
		if err != nil {
			return fmt.Errorf("file index %s: %w", ix.path, err)
		}
		buf = append(append(buf, b...), '\n')
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f == nil {
		return fmt.Errorf("file index %s: closed", ix.path)
	}
	if _, err := ix.f.Write(buf); err != nil {
		return fmt.Errorf("file index %s: %w", ix.path, err)
	}
	if err := ix.f.Sync(); err != nil {
		return fmt.Errorf("file index %s: %w", ix.path, err)
	}
	for _, r := range recs {
		if prev, ok := ix.latest[r.Key()]; !ok || r.Version >= prev.Version {
			ix.latest[r.Key()] = r
		}
	}
	return nil
}

// Pending lists live files not stored yet, oldest attempt first.
func (ix *JSONLIndex) Pending(ctx context.Context, limit int) ([]files.Record, error) {
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
func (ix *JSONLIndex) FilesOf(ctx context.Context, surveyID int64, responseID survey.GUID) ([]files.Record, error) {
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
func (ix *JSONLIndex) Get(ref files.FileRef) (files.Record, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	r, ok := ix.latest[ref.Key()]
	return r, ok
}

// All returns the latest row of every file.
func (ix *JSONLIndex) All() []files.Record {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]files.Record, 0, len(ix.latest))
	for _, r := range ix.latest {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// Close closes the file.
func (ix *JSONLIndex) Close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.f == nil {
		return nil
	}
	err := ix.f.Close()
	ix.f = nil
	return err
}

var _ files.Index = (*JSONLIndex)(nil)
