package warehouse

import (
	"context"
	"time"
)

// Summarizer tells people what the warehouse holds as current (surveysync
// query), with no other tool.
type Summarizer interface {
	// Summary counts the current responses (the latest version of each,
	// deletions excluded) per survey and status: of surveyID, or, when it
	// is 0, of every survey the warehouse knows (ClickHouse: those with a
	// sync state; Parquet: those with files). Where the backend samples
	// (Summary.Sampled), it adds up to sample of the most recently created
	// current responses.
	Summary(ctx context.Context, surveyID int64, sample int) (*Summary, error)
}

// Summary is what Summarizer.Summary found: what surveysync query prints.
type Summary struct {
	// About says where the data is and what was read: the first line.
	About string
	// Surveys are the counts per survey, by survey ID.
	Surveys []SurveyCount
	// Total is the number of current, not deleted, responses in Surveys.
	Total int
	// Deletions says Surveys count the responses whose latest version is
	// a deletion (SurveyCount.Deleted): a backend whose current rows
	// leave them out (ClickHouse's responses_current) does not.
	Deletions bool
	// Sampled says the backend took a sample (Sample, possibly empty).
	Sampled bool
	// Sample are the most recently created current responses, newest
	// first (ties by ID).
	Sample []SampledResponse
	// More is how to look further with another tool, "" for none.
	More string
}

// SurveyCount counts one survey's current responses.
type SurveyCount struct {
	SurveyID int64
	Name     string         // the survey's name, "" when unknown
	ByStatus map[string]int // current, not deleted, per response_status
	Current  int            // current, not deleted
	Deleted  int            // whose latest version is a deletion (Summary.Deletions)
}

// SampledResponse is one current response of a Summary's sample.
type SampledResponse struct {
	ID        string
	SurveyID  int64
	Status    string
	Created   time.Time
	Completed time.Time // zero when null
	Versions  int       // rows written for the response: its versions and deletions
}
