package flatten

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"math"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

// Item is one response to flatten, as the pipeline knows it after fetching
// its detail.
type Item struct {
	// Response is the detail; nil only when Deleted is set and nothing but
	// the ids is known (the API answered 404).
	Response *survey.Response
	// SurveyID and ResponseID are always set. They must agree with
	// Response's when Response carries them.
	SurveyID   int64
	ResponseID survey.GUID
	// Deleted marks a response the service removed (its detail said
	// "deleted" or the API answered 404). A detail whose response_status is
	// "deleted" is treated as Deleted whatever this field says.
	Deleted bool
	// Version is the _version of every row of this item; the pipeline uses
	// the fetch time in nanoseconds.
	Version uint64
	// SyncedAt is the synced_at of the responses row.
	SyncedAt time.Time
}

// Limits of the answers table's index columns (UInt16).
const maxIndex = math.MaxUint16

// MaxAnswers is the most answer cells one response may have: more is
// rejected (reason "too_many_answers") rather than written, so that one
// response cannot make a batch of its own larger than the sinks accept.
const MaxAnswers = 65_536

// Reasons of the permanent errors Add returns (permanent.Reason), used as
// the reason of reject records and as a metric label.
const (
	ReasonBadResponseID    = "bad_response_id"    // the response id is not a GUID
	ReasonIDMismatch       = "id_mismatch"        // the detail names another response or survey
	ReasonNoDetail         = "no_detail"          // no detail and not deleted
	ReasonDateOutOfRange   = "date_out_of_range"  // a date the warehouse's DateTime cannot hold
	ReasonTooManyAnswers   = "too_many_answers"   // more than MaxAnswers answers, or an index over 65,535
	ReasonTooManyQuestions = "too_many_questions" // more than 65,536 pages or questions on a page
	ReasonBadFileID        = "bad_file_id"        // an answer's file_id is not a GUID
)

// MaxUnixSeconds is the latest time the warehouse can hold: ClickHouse's
// DateTime is a UInt32 of seconds since 1970-01-01 00:00:00 UTC, so its
// range ends at 2106-02-07 06:28:15 UTC. Later dates (and dates before
// 1970) would be stored wrapped around, as a wrong but plausible date, or
// as 0000-00-00; Add rejects them (reason "date_out_of_range") instead.
// The Parquet sink holds any date but applies the same rule, so that both
// sinks hold the same rows.
const MaxUnixSeconds = math.MaxUint32

// InDateRange reports whether t fits the warehouse's DateTime columns
// (1970-01-01 00:00:00 to 2106-02-07 06:28:15 UTC). The zero time is in
// range: it stands for "absent" (a null, or the epoch for date_created).
func InDateRange(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	u := t.Unix()
	return u >= 0 && u <= MaxUnixSeconds
}

// Builder appends the rows of items to Arrow record builders for both
// tables. It is not safe for concurrent use: the pipeline keeps one per
// flatten goroutine. Release it when done.
//
// What it writes, per item (docs/schema.md):
//   - one responses row. A deleted item (Item.Deleted, or response_status
//     "deleted" in the detail) gets is_deleted=1, response_status "deleted"
//     and no answers rows; the other columns come from the detail when there
//     is one, else they are empty/null and date_created is the Unix epoch.
//   - one answers row per answer cell, in page, question, answer order, with
//     0-based page_index, question_index and answer_index. A question with
//     no answers yields no answers row (the question's existence is not
//     recorded). Missing labels, text, title and variable are "", missing ids
//     and value are null. An answer that carries only file_id (uploads) gets
//     the file id as its text. Each answers row repeats response_status,
//     date_completed and _version of its response.
//   - response_id is always lower case. Timestamps are UTC milliseconds
//     (finer digits are dropped); a missing date_created is the Unix epoch.
//
// Appending allocates nothing per row: strings are copied straight into the
// builders' buffers, and when a batch starts the builders reserve room for
// one as large as the last (decaying after a burst, so an idle Builder
// stays small). Flush hands the buffers over to the batch.
type Builder struct {
	resp *array.RecordBuilder
	ans  *array.RecordBuilder
	r    respCols
	a    ansCols

	nResp, nAns int
	bytes       int
	// Expected batch size, to reserve capacity when a batch starts: the
	// last batch's size, or half the previous estimate if that is larger
	// (grow at once, shrink gradually after a burst).
	estResp, estAns int
	strs            []*array.StringBuilder // every string builder
	estData         []int                  // their expected data bytes

	token hash.Hash
	buf   [8]byte
	idbuf [36]byte
	// ansEnds[i] is the number of answers rows up to and including the
	// i-th response of the batch being built (Batch.Slice).
	ansEnds []int
}

type respCols struct {
	responseID, surveyName, ip, status, contactHash *array.StringBuilder
	surveyID, distID, contactID, total              *array.Int64Builder
	created, completed, synced                      *array.TimestampBuilder
	urlNames, urlValues                             *array.ListBuilder
	urlName, urlValue                               *array.StringBuilder
	deleted                                         *array.Uint8Builder
	version                                         *array.Uint64Builder
}

type ansCols struct {
	responseID, qType, title, variable, rowLabel, colLabel, choiceLabel, text, status *array.StringBuilder
	surveyID, pageID, questionID, rowID, colID, choiceID, otherID, value              *array.Int64Builder
	pageIdx, questionIdx, answerIdx                                                   *array.Uint16Builder
	completed                                                                         *array.TimestampBuilder
	version                                                                           *array.Uint64Builder
}

// NewBuilder returns a Builder whose buffers come from mem.
func NewBuilder(mem memory.Allocator) *Builder {
	b := &Builder{
		resp:  array.NewRecordBuilder(mem, ResponsesSchema),
		ans:   array.NewRecordBuilder(mem, AnswersSchema),
		token: sha256.New(),
	}
	rf := fieldsByName(b.resp)
	b.r = respCols{
		responseID:  rf["response_id"].(*array.StringBuilder),
		surveyID:    rf["survey_id"].(*array.Int64Builder),
		surveyName:  rf["survey_name"].(*array.StringBuilder),
		distID:      rf["distribution_id"].(*array.Int64Builder),
		contactID:   rf["contact_id"].(*array.Int64Builder),
		contactHash: rf["contact_id_hash"].(*array.StringBuilder),
		ip:          rf["ip_address"].(*array.StringBuilder),
		created:     rf["date_created"].(*array.TimestampBuilder),
		completed:   rf["date_completed"].(*array.TimestampBuilder),
		total:       rf["total_time"].(*array.Int64Builder),
		status:      rf["response_status"].(*array.StringBuilder),
		urlNames:    rf["url_parameters.name"].(*array.ListBuilder),
		urlValues:   rf["url_parameters.value"].(*array.ListBuilder),
		deleted:     rf["is_deleted"].(*array.Uint8Builder),
		synced:      rf["synced_at"].(*array.TimestampBuilder),
		version:     rf["_version"].(*array.Uint64Builder),
	}
	b.r.urlName = b.r.urlNames.ValueBuilder().(*array.StringBuilder)
	b.r.urlValue = b.r.urlValues.ValueBuilder().(*array.StringBuilder)
	b.strs = []*array.StringBuilder{b.r.urlName, b.r.urlValue}
	for _, f := range append(b.resp.Fields(), b.ans.Fields()...) {
		if sb, ok := f.(*array.StringBuilder); ok {
			b.strs = append(b.strs, sb)
		}
	}
	b.estData = make([]int, len(b.strs))
	af := fieldsByName(b.ans)
	b.a = ansCols{
		responseID:  af["response_id"].(*array.StringBuilder),
		surveyID:    af["survey_id"].(*array.Int64Builder),
		pageID:      af["page_id"].(*array.Int64Builder),
		pageIdx:     af["page_index"].(*array.Uint16Builder),
		questionID:  af["question_id"].(*array.Int64Builder),
		questionIdx: af["question_index"].(*array.Uint16Builder),
		qType:       af["question_type"].(*array.StringBuilder),
		title:       af["question_title"].(*array.StringBuilder),
		variable:    af["variable"].(*array.StringBuilder),
		answerIdx:   af["answer_index"].(*array.Uint16Builder),
		rowID:       af["row_id"].(*array.Int64Builder),
		rowLabel:    af["row_label"].(*array.StringBuilder),
		colID:       af["column_id"].(*array.Int64Builder),
		colLabel:    af["column_label"].(*array.StringBuilder),
		choiceID:    af["choice_id"].(*array.Int64Builder),
		choiceLabel: af["choice_label"].(*array.StringBuilder),
		otherID:     af["other_id"].(*array.Int64Builder),
		text:        af["text"].(*array.StringBuilder),
		value:       af["value"].(*array.Int64Builder),
		status:      af["response_status"].(*array.StringBuilder),
		completed:   af["date_completed"].(*array.TimestampBuilder),
		version:     af["_version"].(*array.Uint64Builder),
	}
	return b
}

func fieldsByName(rb *array.RecordBuilder) map[string]array.Builder {
	m := make(map[string]array.Builder, len(rb.Fields()))
	for i, f := range rb.Schema().Fields() {
		m[f.Name] = rb.Field(i)
	}
	return m
}

// Rows returns the number of rows buffered since the last Flush.
func (b *Builder) Rows() (responses, answers int) { return b.nResp, b.nAns }

// Bytes returns an approximation of the bytes buffered since the last Flush
// (fixed column widths plus string lengths), for batching by size.
func (b *Builder) Bytes() int { return b.bytes }

// Approximate fixed widths of a row: 8 bytes per number or timestamp, 4 per
// string or list offset, 1 per validity bit rounded up.
const (
	respRowBytes = 8*8 + 1 + 6*4 + 2
	ansRowBytes  = 11*8 + 3*2 + 9*4 + 3
)

// Add appends the rows of it. It returns an error naming the response, and
// appends nothing, when the item cannot be represented: an invalid
// response id, ids that disagree with the detail, a missing detail on an
// item that is not deleted, a date outside the warehouse's range
// (InDateRange), more than MaxAnswers answers or 65,536 pages, questions on
// a page or answers to a question, or a file_id that is not a GUID. Every
// such error is a permanent.Error (asking the service again returns the
// same detail) whose reason is one of the Reason constants.
func (b *Builder) Add(it Item) error {
	id, err := b.normID(it.ResponseID)
	if err != nil {
		return permanent.New(ReasonBadResponseID, err)
	}
	r := it.Response
	deleted := it.Deleted || (r != nil && r.ResponseStatus == survey.StatusDeleted)
	if r == nil && !deleted {
		return permanent.Errorf(ReasonNoDetail, "flatten response %s of survey %d: no detail and not deleted", it.ResponseID, it.SurveyID)
	}
	if r != nil {
		if r.ResponseID != "" && !equalFold(string(r.ResponseID), id) {
			return permanent.Errorf(ReasonIDMismatch, "flatten response %s of survey %d: detail has response_id %s", it.ResponseID, it.SurveyID, r.ResponseID)
		}
		if r.SurveyID != 0 && r.SurveyID != it.SurveyID {
			return permanent.Errorf(ReasonIDMismatch, "flatten response %s of survey %d: detail has survey_id %d", it.ResponseID, it.SurveyID, r.SurveyID)
		}
		if err := checkDates(r); err != nil {
			return fmt.Errorf("flatten response %s of survey %d: %w", it.ResponseID, it.SurveyID, err)
		}
	}
	if !InDateRange(it.SyncedAt) {
		return permanent.Errorf(ReasonDateOutOfRange, "flatten response %s of survey %d: synced_at %s is outside 1970-01-01..2106-02-07", it.ResponseID, it.SurveyID, it.SyncedAt.Format(time.RFC3339))
	}
	nAns := 0
	if !deleted {
		if nAns, err = countAnswers(r); err != nil {
			return fmt.Errorf("flatten response %s of survey %d: %w", it.ResponseID, it.SurveyID, err)
		}
	}

	// Nothing below can fail: the item is appended whole.
	if b.nResp == 0 {
		b.reserve()
	}
	b.appendResponse(it, id, deleted)
	if nAns > 0 {
		b.appendAnswers(it, id, nAns)
	}
	b.nResp++
	b.nAns += nAns
	b.ansEnds = append(b.ansEnds, b.nAns)

	addToken(b.token, &b.buf, b.idbuf[:], it.Version)
	return nil
}

// normID validates g as a GUID and leaves it, lower case, in b.idbuf. The
// returned string aliases b.idbuf: it is valid until the next call.
func (b *Builder) normID(g survey.GUID) (string, error) {
	if len(g) != len(b.idbuf) {
		return "", fmt.Errorf("flatten response %q: invalid response id: want 36 characters in 8-4-4-4-12 form", string(g))
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", fmt.Errorf("flatten response %q: invalid response id: want '-' at offset %d", string(g), i)
			}
		default:
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			case c >= 'A' && c <= 'F':
				c += 'a' - 'A'
			default:
				return "", fmt.Errorf("flatten response %q: invalid response id: %q is not hexadecimal", string(g), c)
			}
		}
		b.idbuf[i] = c
	}
	return unsafe.String(&b.idbuf[0], len(b.idbuf)), nil
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// checkDates rejects a detail whose dates the warehouse cannot hold.
func checkDates(r *survey.Response) error {
	if !InDateRange(r.DateCreated.Time) {
		return permanent.Errorf(ReasonDateOutOfRange, "date_created %s is outside 1970-01-01..2106-02-07", r.DateCreated.Format(time.RFC3339))
	}
	if r.DateCompleted != nil && !InDateRange(r.DateCompleted.Time) {
		return permanent.Errorf(ReasonDateOutOfRange, "date_completed %s is outside 1970-01-01..2106-02-07", r.DateCompleted.Format(time.RFC3339))
	}
	return nil
}

// countAnswers returns the number of answer cells of r, checking the
// limits of the answers table and the file ids.
func countAnswers(r *survey.Response) (int, error) {
	if len(r.Pages) > maxIndex+1 {
		return 0, permanent.Errorf(ReasonTooManyQuestions, "%d pages: at most %d fit page_index", len(r.Pages), maxIndex+1)
	}
	n := 0
	for pi := range r.Pages {
		p := &r.Pages[pi]
		if len(p.Questions) > maxIndex+1 {
			return 0, permanent.Errorf(ReasonTooManyQuestions, "page %d has %d questions: at most %d fit question_index", p.ID, len(p.Questions), maxIndex+1)
		}
		for qi := range p.Questions {
			q := &p.Questions[qi]
			if len(q.Answers) > maxIndex+1 {
				return 0, permanent.Errorf(ReasonTooManyAnswers, "question %d has %d answers: at most %d fit answer_index", q.ID, len(q.Answers), maxIndex+1)
			}
			for ai := range q.Answers {
				if f := q.Answers[ai].FileID; f != nil {
					if _, err := survey.ParseGUID(string(*f)); err != nil {
						return 0, permanent.Errorf(ReasonBadFileID, "question %d answer %d: file_id is not a GUID (%d bytes; the value is not quoted: it may be personal data)", q.ID, ai, len(*f))
					}
				}
			}
			n += len(q.Answers)
			if n > MaxAnswers {
				return 0, permanent.Errorf(ReasonTooManyAnswers, "more than %d answers", MaxAnswers)
			}
		}
	}
	return n, nil
}

func (b *Builder) appendResponse(it Item, id string, deleted bool) {
	c := &b.r
	r := it.Response
	if r == nil {
		r = &survey.Response{}
	}
	status := r.ResponseStatus
	var isDel uint8
	if deleted {
		status, isDel = survey.StatusDeleted, 1
	}
	appendString(c.responseID, id)
	c.surveyID.Append(it.SurveyID)
	appendString(c.surveyName, r.SurveyName)
	appendOptInt(c.distID, r.DistributionID)
	appendOptInt(c.contactID, r.ContactID)
	appendString(c.ip, r.IPAddress)
	c.created.Append(ts(r.DateCreated.Time))
	appendOptTime(c.completed, r.DateCompleted)
	if r.TotalTime != nil {
		c.total.Append(int64(*r.TotalTime))
	} else {
		c.total.AppendNull()
	}
	appendString(c.status, status)
	c.urlNames.Append(true)
	c.urlValues.Append(true)
	n := len(id) + len(r.SurveyName) + len(r.IPAddress) + len(status) + len(r.ContactIDHash)
	for i := range r.URLParameters {
		p := &r.URLParameters[i]
		appendString(c.urlName, p.Name)
		appendString(c.urlValue, p.Value)
		n += len(p.Name) + len(p.Value) + 8
	}
	c.deleted.Append(isDel)
	c.synced.Append(ts(it.SyncedAt))
	c.version.Append(it.Version)
	appendString(c.contactHash, r.ContactIDHash)
	b.bytes += respRowBytes + n
}

func (b *Builder) appendAnswers(it Item, id string, n int) {
	c := &b.a
	r := it.Response
	// Reserve the n rows, so that fixed-width columns can use UnsafeAppend
	// below. Element reservations grow by powers of two; string data buffers
	// grow on their own (ReserveData would resize to the exact size).
	for _, x := range []array.Builder{
		c.responseID, c.qType, c.title, c.variable, c.rowLabel, c.colLabel, c.choiceLabel, c.text, c.status,
		c.surveyID, c.pageID, c.questionID, c.rowID, c.colID, c.choiceID, c.otherID, c.value,
		c.pageIdx, c.questionIdx, c.answerIdx, c.completed, c.version,
	} {
		x.Reserve(n)
	}
	var completed arrow.Timestamp
	hasCompleted := r.DateCompleted != nil && !r.DateCompleted.IsZero()
	if hasCompleted {
		completed = ts(r.DateCompleted.Time)
	}
	strBytes := 0
	for pi := range r.Pages {
		p := &r.Pages[pi]
		for qi := range p.Questions {
			q := &p.Questions[qi]
			for ai := range q.Answers {
				a := &q.Answers[ai]
				appendString(c.responseID, id)
				c.surveyID.UnsafeAppend(it.SurveyID)
				c.pageID.UnsafeAppend(p.ID)
				c.pageIdx.UnsafeAppend(uint16(pi))
				c.questionID.UnsafeAppend(q.ID)
				c.questionIdx.UnsafeAppend(uint16(qi))
				appendString(c.qType, q.Type)
				appendString(c.title, q.Title)
				appendString(c.variable, q.Variable)
				c.answerIdx.UnsafeAppend(uint16(ai))
				unsafeAppendOptFlex(c.rowID, a.RowID)
				strBytes += appendOptString(c.rowLabel, a.RowLabel)
				unsafeAppendOptFlex(c.colID, a.ColumnID)
				strBytes += appendOptString(c.colLabel, a.ColumnLabel)
				unsafeAppendOptFlex(c.choiceID, a.ChoiceID)
				strBytes += appendOptString(c.choiceLabel, a.ChoiceLabel)
				unsafeAppendOptFlex(c.otherID, a.OtherID)
				switch {
				case a.Text != nil:
					strBytes += appendOptString(c.text, a.Text)
				case a.FileID != nil:
					appendString(c.text, string(*a.FileID))
					strBytes += len(*a.FileID)
				default:
					appendString(c.text, "")
				}
				unsafeAppendOptFlex(c.value, a.Value)
				appendString(c.status, r.ResponseStatus)
				if hasCompleted {
					c.completed.UnsafeAppend(completed)
				} else {
					c.completed.UnsafeAppendBoolToBitmap(false)
				}
				c.version.UnsafeAppend(it.Version)
				strBytes += len(q.Type) + len(q.Title) + len(q.Variable)
			}
		}
	}
	b.bytes += n*(ansRowBytes+len(id)+len(r.ResponseStatus)) + strBytes
}

// appendString appends s without converting it to a fresh []byte: the
// builder copies the bytes and never writes through the slice.
func appendString(sb *array.StringBuilder, s string) {
	sb.BinaryBuilder.Append(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func appendOptString(sb *array.StringBuilder, s *string) int {
	if s == nil {
		appendString(sb, "")
		return 0
	}
	appendString(sb, *s)
	return len(*s)
}

func appendOptInt(ib *array.Int64Builder, v *int64) {
	if v == nil {
		ib.AppendNull()
		return
	}
	ib.Append(*v)
}

// unsafeAppendOptFlex is appendOptFlex on a builder with reserved room.
func unsafeAppendOptFlex(ib *array.Int64Builder, v *survey.FlexInt) {
	if v == nil {
		ib.UnsafeAppendBoolToBitmap(false)
		return
	}
	ib.UnsafeAppend(int64(*v))
}

func appendOptTime(tb *array.TimestampBuilder, t *survey.Time) {
	if t == nil || t.IsZero() {
		tb.AppendNull()
		return
	}
	tb.Append(ts(t.Time))
}

// ts converts t to the schema's millisecond timestamps; the zero time is the
// Unix epoch.
func ts(t time.Time) arrow.Timestamp {
	if t.IsZero() {
		return 0
	}
	return arrow.Timestamp(t.UnixMilli())
}

// Flush returns the rows added since the last Flush as a Batch (possibly
// with zero rows) and resets the builder. The caller owns the batch.
// Token is a hash of the (response_id, _version) pairs in the order added.
func (b *Builder) Flush() *Batch {
	for i, sb := range b.strs {
		b.estData[i] = max(sb.DataLen(), b.estData[i]/2)
	}
	batch := &Batch{
		Responses: b.resp.NewRecordBatch(),
		Answers:   b.ans.NewRecordBatch(),
		ansEnds:   b.ansEnds,
	}
	b.ansEnds = make([]int, 0, max(b.nResp, b.estResp/2))
	batch.Token = tokenOf(b.token)
	b.token.Reset()
	b.estResp, b.estAns = max(b.nResp, b.estResp/2), max(b.nAns, b.estAns/2)
	b.nResp, b.nAns, b.bytes = 0, 0, 0
	return batch
}

// reserve sizes the builders for the expected batch when a batch starts,
// so that it grows its buffers at most a few times. Reserving at the first
// Add rather than at Flush keeps an idle builder small.
func (b *Builder) reserve() {
	if b.estResp > 0 {
		b.resp.Reserve(b.estResp)
	}
	if b.estAns > 0 {
		b.ans.Reserve(b.estAns)
	}
	for i, sb := range b.strs {
		if n := b.estData[i]; n > 0 {
			sb.ReserveData(n)
		}
	}
}

// Release frees the builders' buffers. The Builder must not be used after.
func (b *Builder) Release() {
	b.resp.Release()
	b.ans.Release()
}
