package parquet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// Verifier returns a reader that reads each survey's responses files once
// (ReadCurrent) and answers the pass's questions from that snapshot.
func (w *dirWarehouse) Verifier() warehouse.VerifyReader {
	return &verifyReader{dir: w.dir, surveys: map[int64]*verifySnapshot{}}
}

type verifyReader struct {
	dir     string
	mu      sync.Mutex
	surveys map[int64]*verifySnapshot
}

// verifySnapshot is one survey's current responses, as read once.
type verifySnapshot struct {
	cur []*CurrentResponse // current, not deleted
}

func (v *verifyReader) snapshot(ctx context.Context, surveyID int64) (*verifySnapshot, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.surveys[surveyID]; ok {
		return s, nil
	}
	cur, err := ReadCurrent(ctx, v.dir, surveyID)
	if err != nil {
		return nil, fmt.Errorf("parquet sink: read current responses of survey %d: %w", surveyID, err)
	}
	s := &verifySnapshot{}
	for _, r := range cur.Responses {
		if !r.Deleted && r.SurveyID == surveyID {
			s.cur = append(s.cur, r)
		}
	}
	v.surveys[surveyID] = s
	return s, nil
}

// in returns the responses of r, with the date each is ranged by.
func (v *verifyReader) in(ctx context.Context, r warehouse.Range) ([]*CurrentResponse, []time.Time, error) {
	s, err := v.snapshot(ctx, r.SurveyID)
	if err != nil {
		return nil, nil, err
	}
	var out []*CurrentResponse
	var dates []time.Time
	for _, c := range s.cur {
		if !slices.Contains(r.Statuses, c.Status) {
			continue
		}
		d := c.Completed
		if r.Started || d.IsZero() {
			d = c.Created
		}
		d = warehouse.Second(d)
		if !r.From.IsZero() && d.Before(warehouse.Second(r.From)) || !r.To.IsZero() && !d.Before(warehouse.Second(r.To)) {
			continue
		}
		out = append(out, c)
		dates = append(dates, d)
	}
	return out, dates, nil
}

func (v *verifyReader) Count(ctx context.Context, r warehouse.Range) (warehouse.RangeCount, error) {
	_, dates, err := v.in(ctx, r)
	if err != nil {
		return warehouse.RangeCount{}, err
	}
	out := warehouse.RangeCount{N: int64(len(dates))}
	if len(dates) > 0 {
		sort.Slice(dates, func(i, j int) bool { return dates[i].Before(dates[j]) })
		out.Mid = dates[len(dates)/2]
	}
	return out, nil
}

func (v *verifyReader) IDs(ctx context.Context, r warehouse.Range) (map[survey.GUID]string, error) {
	rs, _, err := v.in(ctx, r)
	if err != nil {
		return nil, err
	}
	out := make(map[survey.GUID]string, len(rs))
	for _, c := range rs {
		out[survey.GUID(c.ID)] = c.Status
	}
	return out, nil
}

func (v *verifyReader) Sample(ctx context.Context, surveyID int64, n int) ([]survey.GUID, error) {
	s, err := v.snapshot(ctx, surveyID)
	if err != nil {
		return nil, err
	}
	out := make([]survey.GUID, 0, len(s.cur))
	for _, c := range s.cur {
		out = append(out, survey.GUID(c.ID))
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(n, len(out))], nil
}

// verifyAnswerColumns are the answers columns Content reads.
var verifyAnswerColumns = []string{"response_id", "page_id", "page_index", "question_id", "question_index", "answer_index",
	"row_id", "column_id", "choice_id", "other_id", "value", "text", "_version"}

// Content reads the survey's answers files for the responses' current
// versions.
func (v *verifyReader) Content(ctx context.Context, surveyID int64, ids []survey.GUID) (map[survey.GUID]warehouse.Content, error) {
	s, err := v.snapshot(ctx, surveyID)
	if err != nil {
		return nil, err
	}
	want := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		want[string(id)] = struct{}{}
	}
	type cell struct {
		page, question, answer uint16
		a                      warehouse.Answer
	}
	version := map[string]uint64{}
	out := map[survey.GUID]warehouse.Content{}
	cells := map[string][]cell{}
	for _, c := range s.cur {
		if _, ok := want[c.ID]; !ok {
			continue
		}
		version[c.ID] = c.Version
		out[survey.GUID(c.ID)] = warehouse.Content{Status: c.Status, Created: warehouse.Second(c.Created), Completed: warehouse.Second(c.Completed)}
	}
	if len(out) == 0 {
		return out, nil
	}
	paths, err := filepath.Glob(filepath.Join(v.dir, flatten.TableAnswers, fmt.Sprintf("survey_id=%d", surveyID), "date=*", "*.parquet"))
	if err != nil {
		return nil, err
	}
	mem := memory.NewGoAllocator()
	for _, path := range paths {
		err := readColumns(ctx, mem, path, verifyAnswerColumns, func(rec arrow.RecordBatch) error {
			ids, ok1 := rec.Column(0).(*array.String)
			pageID, ok2 := rec.Column(1).(*array.Int64)
			pageIdx, ok3 := rec.Column(2).(*array.Uint16)
			qID, ok4 := rec.Column(3).(*array.Int64)
			qIdx, ok5 := rec.Column(4).(*array.Uint16)
			aIdx, ok6 := rec.Column(5).(*array.Uint16)
			var opt [5]*array.Int64
			okOpt := true
			for k := range opt {
				a, ok := rec.Column(6 + k).(*array.Int64)
				opt[k], okOpt = a, okOpt && ok
			}
			text, ok7 := rec.Column(11).(*array.String)
			versions, ok8 := rec.Column(12).(*array.Uint64)
			if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8 && okOpt) {
				return errors.New("unexpected column types: not a surveysync answers file")
			}
			for i := 0; i < ids.Len(); i++ {
				id := ids.Value(i)
				ver, ok := version[id]
				if !ok || versions.Value(i) != ver {
					continue
				}
				a := warehouse.Answer{PageID: pageID.Value(i), QuestionID: qID.Value(i), Text: text.Value(i),
					RowID: optInt64(opt[0], i), ColumnID: optInt64(opt[1], i), ChoiceID: optInt64(opt[2], i),
					OtherID: optInt64(opt[3], i), Value: optInt64(opt[4], i)}
				cells[id] = append(cells[id], cell{pageIdx.Value(i), qIdx.Value(i), aIdx.Value(i), a})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("parquet sink: %s: %w", path, err)
		}
	}
	for id, cs := range cells {
		sort.Slice(cs, func(i, j int) bool {
			a, b := cs[i], cs[j]
			if a.page != b.page {
				return a.page < b.page
			}
			if a.question != b.question {
				return a.question < b.question
			}
			return a.answer < b.answer
		})
		c := out[survey.GUID(id)]
		for k, x := range cs {
			if k > 0 && x.page == cs[k-1].page && x.question == cs[k-1].question && x.answer == cs[k-1].answer {
				continue // the same version written twice (a retried write)
			}
			c.Answers = append(c.Answers, x.a)
		}
		out[survey.GUID(id)] = c
	}
	return out, nil
}

func optInt64(a *array.Int64, i int) warehouse.OptInt {
	if a.IsNull(i) {
		return warehouse.OptInt{}
	}
	return warehouse.OptInt{V: a.Value(i), Valid: true}
}
