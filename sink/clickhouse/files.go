package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// FileIndex keeps the index of uploaded files in uploaded_files (migration
// 0030) and implements files.Index for sink/blob's copier.
type FileIndex struct{ s *Sink }

// NewFileIndex returns the uploaded-files index on s.
func NewFileIndex(s *Sink) *FileIndex { return &FileIndex{s: s} }

var _ files.Index = (*FileIndex)(nil)

// Record appends one row per record in one insert; it returns nil only once
// they are written. A record without a Version gets the sink's next one.
func (x *FileIndex) Record(ctx context.Context, recs []files.Record) error {
	if len(recs) == 0 {
		return nil
	}
	s := x.s
	table := s.table("uploaded_files")
	batch, err := s.Conn().PrepareBatch(s.insertCtx(ctx), "INSERT INTO "+table+
		" (file_id, response_id, survey_id, question_id, object_url, file_name, size_bytes, sha256, content_type,"+
		" stored_at, error, attempts, is_deleted, _version)")
	if err != nil {
		return fmt.Errorf("clickhouse: record uploaded files into %s: %w", table, err)
	}
	defer batch.Close()
	for _, r := range recs {
		v := r.Version
		if v == 0 {
			v = s.nextVersion()
		}
		at := r.StoredAt
		if at.IsZero() {
			at = time.Now()
		}
		var del uint8
		if r.Deleted {
			del = 1
		}
		if err := batch.Append(string(r.FileID), string(r.ResponseID), r.SurveyID, r.QuestionID, r.ObjectURL, r.FileName,
			uint64(max(r.Size, 0)), r.SHA256, r.ContentType, at.UTC(), r.Error, uint32(max(r.Attempts, 0)), del, v); err != nil {
			return fmt.Errorf("clickhouse: record uploaded files into %s: file %s: %w", table, r.FileID, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: record uploaded files into %s: %w", table, err)
	}
	return nil
}

const fileColumns = "toString(file_id), toString(response_id), survey_id, question_id, object_url, file_name, size_bytes," +
	" sha256, content_type, stored_at, error, attempts, _version, 0"

// latestFileColumns are fileColumns at each file's latest version, deleted
// or not, from uploaded_files grouped by survey_id, response_id, file_id.
const latestFileColumns = "toString(file_id), toString(response_id), survey_id, argMax(question_id, _version), argMax(object_url, _version)," +
	" argMax(file_name, _version), argMax(size_bytes, _version), argMax(sha256, _version), argMax(content_type, _version)," +
	" argMax(stored_at, _version), argMax(error, _version), argMax(attempts, _version), max(_version), argMax(is_deleted, _version)"

// Pending lists up to limit live files not stored yet (error set), oldest
// attempt first, from uploaded_files_current.
func (x *FileIndex) Pending(ctx context.Context, limit int) ([]files.Record, error) {
	if limit <= 0 {
		limit = 10_000
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE error != '' ORDER BY stored_at LIMIT %d",
		fileColumns, x.s.table("uploaded_files_current"), limit)
	return x.query(ctx, "list pending uploaded files", q)
}

// FilesOf returns every file of a response at its latest version, a
// deleted one too (Deleted set), from uploaded_files.
func (x *FileIndex) FilesOf(ctx context.Context, surveyID int64, responseID survey.GUID) ([]files.Record, error) {
	q := fmt.Sprintf("SELECT %s FROM %s WHERE survey_id = ? AND response_id = toUUID(?) GROUP BY survey_id, response_id, file_id ORDER BY file_id",
		latestFileColumns, x.s.table("uploaded_files"))
	return x.query(ctx, "list uploaded files of response "+string(responseID), q, surveyID, string(responseID))
}

func (x *FileIndex) query(ctx context.Context, what, q string, args ...any) ([]files.Record, error) {
	rows, err := x.s.Conn().Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s: %w", what, err)
	}
	defer rows.Close()
	var out []files.Record
	for rows.Next() {
		var (
			r             files.Record
			fid, rid      string
			size          uint64
			attempts      uint32
			storedAt      time.Time
			version       uint64
			surveyID, qid int64
			deleted       uint8
		)
		if err := rows.Scan(&fid, &rid, &surveyID, &qid, &r.ObjectURL, &r.FileName, &size, &r.SHA256, &r.ContentType,
			&storedAt, &r.Error, &attempts, &version, &deleted); err != nil {
			return nil, fmt.Errorf("clickhouse: %s: %w", what, err)
		}
		r.FileRef = files.FileRef{SurveyID: surveyID, ResponseID: survey.GUID(rid), QuestionID: qid, FileID: survey.GUID(fid)}
		r.Size, r.Attempts, r.StoredAt, r.Version, r.Deleted = int64(size), int(attempts), storedAt.UTC(), version, deleted == 1
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: %s: %w", what, err)
	}
	return out, nil
}

// Undiscovered returns files named by upload answers in answers_current
// (question_type containing one of typeMatch, case-insensitive, as
// files.IsUploadType) whose question has no row at all in uploaded_files:
// files a crash lost between the answers being written and the copier
// recording them. At most limit answer rows are read per call.
func (x *FileIndex) Undiscovered(ctx context.Context, typeMatch []string, limit int) ([]files.FileRef, error) {
	if len(typeMatch) == 0 {
		typeMatch = files.DefaultTypeMatch()
	}
	if limit <= 0 {
		limit = 10_000
	}
	var conds []string
	for _, m := range typeMatch {
		m = strings.ToLower(strings.TrimSpace(m))
		if m == "" {
			continue
		}
		conds = append(conds, "lower(question_type) LIKE "+quoteString("%"+likeEscaper.Replace(m)+"%"))
	}
	if len(conds) == 0 {
		return nil, nil
	}
	q := fmt.Sprintf("SELECT survey_id, toString(response_id), question_id, text FROM %s"+
		" WHERE (%s) AND text != ''"+
		" AND (response_id, question_id) GLOBAL NOT IN (SELECT response_id, question_id FROM %s)"+
		" LIMIT %d",
		x.s.table("answers_current"), strings.Join(conds, " OR "), x.s.table("uploaded_files"), limit)
	rows, err := x.s.Conn().Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: find undiscovered uploaded files: %w", err)
	}
	defer rows.Close()
	var out []files.FileRef
	seen := map[survey.GUID]bool{}
	for rows.Next() {
		var (
			sid, qid int64
			rid      string
			text     string
		)
		if err := rows.Scan(&sid, &rid, &qid, &text); err != nil {
			return nil, fmt.Errorf("clickhouse: find undiscovered uploaded files: %w", err)
		}
		for _, id := range files.GUIDsInText(text) {
			if !seen[id] {
				seen[id] = true
				out = append(out, files.FileRef{SurveyID: sid, ResponseID: survey.GUID(rid), QuestionID: qid, FileID: id})
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: find undiscovered uploaded files: %w", err)
	}
	return out, nil
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// quoteString renders s as a ClickHouse string literal.
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
