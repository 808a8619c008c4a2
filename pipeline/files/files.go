// Package files finds the files respondents uploaded in a response and
// describes the index row (table uploaded_files) each stored file gets.
//
// The detection rule is docs/api.md's decision, kept here and nowhere else:
// the API's answer object (docs/api.md §2.5) has no file field, so a question whose `type`
// contains one of a configurable list of substrings (default "file" and
// "upload", case-insensitive) carries its file ids as GUIDs in its answers'
// `text` (possibly several, separated by commas, semicolons or whitespace)
// and in `file_id` when the service sends that field. Every GUID found is a
// FileRef; duplicates within a response are dropped. Text that is not a GUID
// (a file name, "N/A") is ignored.
//
// sink/blob copies the files; sink/clickhouse (files.go) and sink/blob's
// JSONL index implement Index. This package imports only survey, so
// the pipeline, sources and sinks can all use it.
package files

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// DefaultTypeMatch is the default list of question-type substrings that mark
// an upload question (docs/api.md: "a question whose type contains file or
// upload"), files.type_match's default; each call returns a new slice.
func DefaultTypeMatch() []string { return []string{"file", "upload"} }

// FileRef names one uploaded file: the download path of docs/api.md §4.5 plus the
// question it was uploaded to (the join key with answers_current).
type FileRef struct {
	SurveyID   int64
	ResponseID survey.GUID
	QuestionID int64
	FileID     survey.GUID
}

// Key is the object key of the file in the store:
// surveys/{survey_id}/responses/{response_id}/{file_id}.
func (r FileRef) Key() string {
	return fmt.Sprintf("surveys/%d/responses/%s/%s", r.SurveyID, r.ResponseID, r.FileID)
}

// IsUploadType reports whether a question type marks an upload question
// under typeMatch (nil or empty means DefaultTypeMatch). Matching is a
// case-insensitive substring test.
func IsUploadType(questionType string, typeMatch []string) bool {
	if len(typeMatch) == 0 {
		typeMatch = DefaultTypeMatch()
	}
	t := strings.ToLower(questionType)
	for _, m := range typeMatch {
		if m = strings.ToLower(strings.TrimSpace(m)); m != "" && strings.Contains(t, m) {
			return true
		}
	}
	return false
}

// Retained returns what the daemon reads of a written response after its
// rows are durable (pipeline.Options.Retain): its ids, survey name and
// status, and the upload questions under typeMatch, whose answers FindFiles
// reads. The rest of the detail, most of it, is left to the collector while
// the response's batch waits for its write. Nothing of r is shared: the
// strings kept are copies (a decoder may cut them from a buffer as large as
// the whole detail).
func Retained(r *survey.Response, typeMatch []string) *survey.Response {
	out := &survey.Response{
		ResponseID:     survey.GUID(strings.Clone(string(r.ResponseID))),
		SurveyID:       r.SurveyID,
		SurveyName:     strings.Clone(r.SurveyName),
		ResponseStatus: strings.Clone(r.ResponseStatus),
	}
	for _, p := range r.Pages {
		var qs []survey.Question
		for _, q := range p.Questions {
			if !IsUploadType(q.Type, typeMatch) {
				continue
			}
			kept := survey.Question{ID: q.ID, Type: strings.Clone(q.Type), Answers: make([]survey.Answer, 0, len(q.Answers))}
			for _, a := range q.Answers {
				var k survey.Answer
				if a.FileID != nil {
					id := survey.GUID(strings.Clone(string(*a.FileID)))
					k.FileID = &id
				}
				if a.Text != nil {
					t := strings.Clone(*a.Text)
					k.Text = &t
				}
				kept.Answers = append(kept.Answers, k)
			}
			qs = append(qs, kept)
		}
		if qs != nil {
			out.Pages = append(out.Pages, survey.Page{ID: p.ID, Questions: qs})
		}
	}
	return out
}

// FindFiles returns the files uploaded in r, in page, question and answer
// order, each once (by file id). typeMatch nil or empty means
// DefaultTypeMatch. A deleted response or one without pages yields none.
func FindFiles(r *survey.Response, typeMatch []string) []FileRef {
	if r == nil {
		return nil
	}
	var out []FileRef
	seen := map[survey.GUID]bool{}
	add := func(q int64, id survey.GUID) {
		if seen[id] {
			return
		}
		seen[id] = true
		out = append(out, FileRef{SurveyID: r.SurveyID, ResponseID: r.ResponseID, QuestionID: q, FileID: id})
	}
	for _, p := range r.Pages {
		for _, q := range p.Questions {
			if !IsUploadType(q.Type, typeMatch) {
				continue
			}
			for _, a := range q.Answers {
				if a.FileID != nil {
					if id, err := survey.ParseGUID(string(*a.FileID)); err == nil {
						add(q.ID, id)
					}
				}
				if a.Text != nil {
					for _, id := range GUIDsInText(*a.Text) {
						add(q.ID, id)
					}
				}
			}
		}
	}
	return out
}

// GUIDsInText returns the GUIDs in s, a list separated by commas,
// semicolons or whitespace; other tokens are ignored. Braces around a GUID
// ({…}) are accepted. The result is lower case, in order, with repeats.
func GUIDsInText(s string) []survey.GUID {
	var out []survey.GUID
	for _, tok := range strings.FieldsFunc(s, func(c rune) bool {
		switch c {
		case ',', ';', ' ', '\t', '\n', '\r', '|':
			return true
		}
		return false
	}) {
		tok = strings.TrimSuffix(strings.TrimPrefix(tok, "{"), "}")
		if id, err := survey.ParseGUID(tok); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// Record is one version of a file's row in the index (table uploaded_files).
// A stored file has SHA256 set and Error empty; a file that could not be
// copied yet has Error set (and SHA256 empty) and is retried; a file of a
// deleted response has Deleted set. The newest Version wins.
type Record struct {
	FileRef
	ObjectURL   string    // where the object is, e.g. s3://bucket/surveys/… or file:///…
	FileName    string    // original name (UTF-8) from Content-Disposition, "" when none came
	ContentType string    // from the download's Content-Type
	Size        int64     // bytes stored
	SHA256      string    // lower-case hex of the stored bytes; "" until stored
	StoredAt    time.Time // time of this version: when stored, or of the last attempt
	Error       string    // last error; "" when stored
	Attempts    int       // failed attempts so far
	Deleted     bool      // the response was deleted
	Version     uint64    // _version: larger wins (nanoseconds since the epoch)
}

// Stored reports whether the record describes a stored, live file.
func (r Record) Stored() bool { return r.SHA256 != "" && r.Error == "" && !r.Deleted }

// Index keeps the uploaded_files rows. Implementations: sink/clickhouse
// (FileIndex, table uploaded_files) and sink/parquet (FileIndex, a file
// under the data folder).
type Index interface {
	// Record stores new versions of rows. It returns nil only once they are
	// durable.
	Record(ctx context.Context, recs []Record) error
	// Pending returns up to limit live files that are not stored yet (Error
	// set, not deleted), at their latest version, oldest attempt first.
	Pending(ctx context.Context, limit int) ([]Record, error)
	// FilesOf returns the latest version of every file of a response.
	FilesOf(ctx context.Context, surveyID int64, responseID survey.GUID) ([]Record, error)
}

// Discoverer is implemented by indexes that can find files named in stored
// answers but unknown to the index (sink/clickhouse's FileIndex reads
// answers_current): the files a crash lost between a response's rows being
// written and the copier recording them. The copier calls it at start and
// then periodically.
type Discoverer interface {
	Undiscovered(ctx context.Context, typeMatch []string, limit int) ([]FileRef, error)
}
