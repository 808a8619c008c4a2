package daemon

import (
	"context"
	"errors"
	"sort"

	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
)

// CurrentCounts counts the warehouse's current responses (its inventory:
// responses_current in ClickHouse) per survey and status, for surveysync
// query: of surveyID, or (0) of every survey with a sync state, named from
// the surveys table; sorted by survey id, with their total. The Parquet
// files are counted by parquet.ReadCurrent (the Parquet warehouse keeps no
// inventory: an error here).
func CurrentCounts(ctx context.Context, wh warehouse.Warehouse, surveyID int64) ([]parquet.SurveyCount, int, error) {
	inv := wh.Inventory()
	if inv == nil {
		return nil, 0, errors.New("the warehouse keeps no inventory of current responses")
	}
	ids := map[int64]string{}
	if surveyID != 0 {
		ids[surveyID] = ""
	} else {
		states, err := wh.LoadStates(ctx)
		if err != nil {
			return nil, 0, err
		}
		for _, s := range states {
			ids[s.SurveyID] = ""
		}
	}
	if surveys, err := wh.LoadSurveys(ctx); err == nil {
		for _, s := range surveys {
			if _, ok := ids[s.SurveyID]; ok {
				ids[s.SurveyID] = s.Name
			}
		}
	}
	var counts []parquet.SurveyCount
	total := 0
	for id, name := range ids {
		cur, err := inv.CurrentResponses(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		sc := parquet.SurveyCount{SurveyID: id, Name: name, ByStatus: map[string]int{}, Current: len(cur)}
		for _, s := range cur {
			sc.ByStatus[s]++
		}
		total += len(cur)
		counts = append(counts, sc)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].SurveyID < counts[j].SurveyID })
	return counts, total, nil
}
