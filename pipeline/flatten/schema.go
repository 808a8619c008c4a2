// Package flatten turns survey responses into columnar Apache Arrow records:
// one row per response in the responses table and one row per answer cell
// in the long answers table (docs/schema.md). It is pure: no I/O, no goroutines.
package flatten

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Table names, shared by every sink.
const (
	TableResponses = "responses"
	TableAnswers   = "answers"
)

var tsUTC = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}

// ResponsesSchema is the Arrow schema of the responses table. Column order is
// the contract with the sinks: sink/clickhouse appends by position and names.
var ResponsesSchema = arrow.NewSchema([]arrow.Field{
	{Name: "response_id", Type: arrow.BinaryTypes.String}, // lower-case GUID
	{Name: "survey_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "survey_name", Type: arrow.BinaryTypes.String},
	{Name: "distribution_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "contact_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "ip_address", Type: arrow.BinaryTypes.String},
	{Name: "date_created", Type: tsUTC},
	{Name: "date_completed", Type: tsUTC, Nullable: true},
	{Name: "total_time", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "response_status", Type: arrow.BinaryTypes.String},
	{Name: "url_parameters.name", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "url_parameters.value", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "is_deleted", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "synced_at", Type: tsUTC},
	{Name: "_version", Type: arrow.PrimitiveTypes.Uint64},
	// Added by issue 23 (privacy.fields.contact_id: hash), hence last: the
	// hash of the contact id, "" when it is kept or dropped.
	{Name: "contact_id_hash", Type: arrow.BinaryTypes.String},
}, nil)

// AnswersSchema is the Arrow schema of the long answers table: one row per
// answer cell, in page/question/answer order. Labels and text are empty
// strings when the service omits them; ids and value are null.
var AnswersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "response_id", Type: arrow.BinaryTypes.String},
	{Name: "survey_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "page_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "page_index", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "question_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "question_index", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "question_type", Type: arrow.BinaryTypes.String},
	{Name: "question_title", Type: arrow.BinaryTypes.String},
	{Name: "variable", Type: arrow.BinaryTypes.String},
	{Name: "answer_index", Type: arrow.PrimitiveTypes.Uint16},
	{Name: "row_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "row_label", Type: arrow.BinaryTypes.String},
	{Name: "column_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "column_label", Type: arrow.BinaryTypes.String},
	{Name: "choice_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "choice_label", Type: arrow.BinaryTypes.String},
	{Name: "other_id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "text", Type: arrow.BinaryTypes.String},
	{Name: "value", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "response_status", Type: arrow.BinaryTypes.String},
	{Name: "date_completed", Type: tsUTC, Nullable: true},
	{Name: "_version", Type: arrow.PrimitiveTypes.Uint64},
}, nil)

// Batch is what a sink writes in one go: the responses rows and the answers
// rows of the same set of responses, at the versions given. The batch owns
// its records; whoever holds the batch last calls Release exactly once.
type Batch struct {
	Responses arrow.RecordBatch // ResponsesSchema
	Answers   arrow.RecordBatch // AnswersSchema
	// Token identifies the batch's content (a hash of its response ids and
	// versions): a sink that retries a write can use it to deduplicate.
	Token string

	// ansEnds[i] is the number of answers rows of responses 0..i (a
	// Builder's batch: each response's answers rows follow those of the
	// response before it); nil in a batch made otherwise.
	ansEnds []int
}

// Slice returns responses lo..hi-1 of a batch made by a Builder (their
// responses rows and their answers rows) as a batch of their own, sharing
// b's buffers: nothing is copied, and b stays valid. The caller releases
// the slice. Its Token is the one a Builder gives the same responses at the
// same versions, so a sink deduplicates a write of the slice as it would a
// write of those responses built again. The pipeline writes a refused batch
// again in slices to find the responses the sink refuses, without keeping
// the decoded responses until the write.
func (b *Batch) Slice(lo, hi int) *Batch {
	n := int(b.Responses.NumRows())
	if lo < 0 || hi > n || lo > hi {
		panic(fmt.Sprintf("flatten: Slice(%d, %d) of a batch of %d responses", lo, hi, n))
	}
	if len(b.ansEnds) != n {
		panic("flatten: Slice of a batch not made by a Builder")
	}
	aLo, aHi := 0, 0
	if lo > 0 {
		aLo = b.ansEnds[lo-1]
	}
	if hi > 0 {
		aHi = b.ansEnds[hi-1]
	}
	out := &Batch{
		Responses: b.Responses.NewSlice(int64(lo), int64(hi)),
		Answers:   b.Answers.NewSlice(int64(aLo), int64(aHi)),
		ansEnds:   make([]int, hi-lo),
	}
	for i := range out.ansEnds {
		out.ansEnds[i] = b.ansEnds[lo+i] - aLo
	}
	ids := out.Responses.Column(ResponsesSchema.FieldIndices("response_id")[0]).(*array.String)
	versions := out.Responses.Column(ResponsesSchema.FieldIndices("_version")[0]).(*array.Uint64)
	h := sha256.New()
	var buf [8]byte
	for i := range hi - lo {
		addToken(h, &buf, []byte(ids.Value(i)), versions.Value(i))
	}
	out.Token = tokenOf(h)
	return out
}

// addToken adds a response (its lower-case id and its version) to the hash
// a batch's Token is made of; buf is scratch space.
func addToken(h hash.Hash, buf *[8]byte, id []byte, version uint64) {
	h.Write(id)
	binary.BigEndian.PutUint64(buf[:], version)
	h.Write(buf[:])
}

// tokenOf is the Token of the responses added to h.
func tokenOf(h hash.Hash) string {
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// Rows returns the number of response rows and answer rows.
func (b *Batch) Rows() (responses, answers int64) {
	if b.Responses != nil {
		responses = b.Responses.NumRows()
	}
	if b.Answers != nil {
		answers = b.Answers.NumRows()
	}
	return
}

// Release releases both records.
func (b *Batch) Release() {
	if b.Responses != nil {
		b.Responses.Release()
		b.Responses = nil
	}
	if b.Answers != nil {
		b.Answers.Release()
		b.Answers = nil
	}
}
