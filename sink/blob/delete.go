package blob

import (
	"context"
	"fmt"
	"io"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// DeleteResponse removes every object stored for one response (the keys
// under surveys/{survey_id}/responses/{response_id}/) and returns how many
// it removed. Objects already gone count as removed by someone else: a
// second call removes nothing and succeeds (erasure, docs/privacy.md).
func (s *Store) DeleteResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (int, error) {
	prefix := files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key() // ends in "/"
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	n := 0
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("list %s: %w", s.ObjectURL(prefix), err)
		}
		if obj.IsDir {
			continue
		}
		if err := s.bucket.Delete(ctx, obj.Key); err != nil {
			if gcerrors.Code(err) == gcerrors.NotFound {
				continue
			}
			return n, fmt.Errorf("delete %s: %w", s.ObjectURL(obj.Key), err)
		}
		n++
	}
}
