package warehouse

import (
	"context"
	"time"

	"github.com/surveysync/surveysync/wide"
)

// Tables an Exporter exports (surveysync export --table).
const (
	ExportWide      = "wide"      // one row per current response, a column per question (docs/schema.md, "Wide tables")
	ExportResponses = "responses" // the current versions' responses rows (as responses_current)
	ExportAnswers   = "answers"   // the current versions' answers rows (as answers_current)
)

// Exporter reads a survey's current rows out of the warehouse (surveysync
// export), streamed: memory does not grow with the survey.
type Exporter interface {
	// WideColumns are the columns recorded for the survey's wide table
	// (after the response columns), named as package wide names them; the
	// wide export writes those of them its settings choose (choice-id
	// columns only with wide.choice_ids).
	WideColumns(ctx context.Context, surveyID int64) ([]wide.Column, error)
	// Export writes the survey's current rows of table (ExportWide,
	// ExportResponses or ExportAnswers) to the writer open returns for the
	// table's fields, and closes it. A response whose latest version is a
	// deletion has no row. When since is not zero only the responses read
	// (synced_at) at or after it are written, with their answers. It
	// returns the number of rows. A survey never written has no rows in
	// the long tables, and no wide table: ExportWide is an error then.
	Export(ctx context.Context, table string, surveyID int64, since time.Time, open func([]wide.Field) (wide.Writer, error)) (int, error)
}
