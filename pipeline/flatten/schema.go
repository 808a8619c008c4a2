// Package flatten turns survey responses into columnar Apache Arrow records:
// one row per response in the responses table and one row per answer cell
// in the long answers table (docs/schema.md). It is pure: no I/O, no goroutines.
package flatten

import (
	"github.com/apache/arrow-go/v18/arrow"
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
