package blob

import (
	"context"
	"fmt"

	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// MarkDeleted queues the marking of a deleted response's files (and their
// removal from the store when DeleteWithResponse is on); it never blocks.
// Run does the work and retries it until it succeeds.
func (c *Copier) MarkDeleted(surveyID int64, responseID survey.GUID) {
	c.recentMu.Lock()
	if len(c.deleted) >= maxRecent {
		clear(c.deleted)
	}
	c.deleted[files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key()] = true
	c.recentMu.Unlock()
	c.q.dropResponse(surveyID, responseID)
	c.q.push(task{del: true, ref: files.FileRef{SurveyID: surveyID, ResponseID: responseID}}, nil)
}

// markDeleted records every file of the response as deleted: the files in
// the index and the objects under its prefix; it removes the objects when
// DeleteWithResponse is on.
func (c *Copier) markDeleted(ctx context.Context, surveyID int64, responseID survey.GUID) error {
	byID := map[survey.GUID]files.Record{}
	if c.idx != nil {
		recs, err := c.idx.FilesOf(ctx, surveyID, responseID)
		if err != nil {
			return fmt.Errorf("list files of response %s in the index: %w", responseID, err)
		}
		for _, r := range recs {
			byID[r.FileID] = r
		}
	}
	prefix := files.FileRef{SurveyID: surveyID, ResponseID: responseID}.Key() // ends in "/"
	objs, err := c.st.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("list %s: %w", c.st.ObjectURL(prefix), err)
	}
	keys := make([]string, 0, len(objs))
	for _, obj := range objs {
		keys = append(keys, obj.Key)
		id, perr := survey.ParseGUID(obj.Key[len(prefix):])
		if perr != nil {
			continue // not ours
		}
		if _, ok := byID[id]; !ok {
			byID[id] = files.Record{
				FileRef:   files.FileRef{SurveyID: surveyID, ResponseID: responseID, FileID: id},
				ObjectURL: c.st.ObjectURL(obj.Key), Size: obj.Size,
			}
		}
	}
	if c.o.DeleteWithResponse {
		for _, k := range keys {
			if err := c.st.Delete(ctx, k); err != nil {
				return fmt.Errorf("delete %s: %w", c.st.ObjectURL(k), err)
			}
		}
	}
	now := c.o.Now()
	for _, r := range byID {
		if r.Deleted {
			continue
		}
		r.Deleted, r.StoredAt, r.Version = true, now, 0
		c.m.deleted.Inc()
		c.record(r)
	}
	return nil
}

// wasDeleted reports whether this run saw ref's response deleted.
func (c *Copier) wasDeleted(ref files.FileRef) bool {
	c.recentMu.Lock()
	defer c.recentMu.Unlock()
	return c.deleted[files.FileRef{SurveyID: ref.SurveyID, ResponseID: ref.ResponseID}.Key()]
}
