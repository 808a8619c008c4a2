package blob

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// DeleteResponse removes every object stored for one response (the keys
// under surveys/{survey_id}/responses/{response_id}/) and returns how many
// it removed. A second call finds nothing and succeeds (erasure,
// docs/privacy.md).
func (s *Store) DeleteResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (int, error) {
	prefix := files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key() // ends in "/"
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", s.ObjectURL(prefix), err)
	}
	for i, obj := range objs {
		if err := s.Delete(ctx, obj.Key); err != nil {
			return i, fmt.Errorf("delete %s: %w", s.ObjectURL(obj.Key), err)
		}
	}
	return len(objs), nil
}
