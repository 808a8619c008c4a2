package surveyapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/surveysync/surveysync/survey"
)

// ListResponses reads one page of a survey's responses (docs/api.md §4.3). Zero
// fields of q are not sent (the service's defaults apply: page 1, 50 per
// page, status completed).
func (c *Client) ListResponses(ctx context.Context, surveyID int64, q survey.ListQuery) (*survey.ResponseList, error) {
	const op = OpListResponses
	qs, err := listQuery(q)
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, cause: err}
	}
	u := c.base + "/surveys/" + strconv.FormatInt(surveyID, 10) + "/responses"
	if qs != "" {
		u += "?" + qs
	}
	var out *survey.ResponseList
	subject := "survey " + strconv.FormatInt(surveyID, 10) + " page " + strconv.Itoa(max(q.Page, 1))
	_, err = c.do(ctx, &request{op: op, method: http.MethodGet, url: u, subject: subject},
		func(_ int, reqID string, body []byte, ct string) (string, error) {
			l, id, err := decodeResult[survey.ResponseList](reqID, body, ct, false)
			if err != nil {
				return id, err
			}
			if err := checkList(l); err != nil {
				return id, err
			}
			out = l
			return id, nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func listQuery(q survey.ListQuery) (string, error) {
	if q.Page < 0 {
		return "", fmt.Errorf("page %d: must be >= 1", q.Page)
	}
	if q.PerPage < 0 || q.PerPage > 1000 {
		return "", fmt.Errorf("per_page %d: must be 1 to 1000", q.PerPage)
	}
	switch q.Status {
	case "", survey.StatusCompleted, survey.StatusDisqualified, survey.StatusQuotaFull, survey.StatusPartial:
	default:
		return "", fmt.Errorf("status %q: want completed, disqualified, quotafull or partial", q.Status)
	}
	v := url.Values{}
	if q.Page > 0 {
		v.Set("page", strconv.Itoa(q.Page))
	}
	if q.PerPage > 0 {
		v.Set("per_page", strconv.Itoa(q.PerPage))
	}
	for _, p := range []struct {
		name string
		t    time.Time
	}{
		{"start_started_at", q.StartStartedAt},
		{"end_started_at", q.EndStartedAt},
		{"start_completed_at", q.StartCompletedAt},
		{"end_completed_at", q.EndCompletedAt},
	} {
		if !p.t.IsZero() {
			v.Set(p.name, survey.FormatTime(p.t))
		}
	}
	if q.Status != "" {
		v.Set("status", q.Status)
	}
	return v.Encode(), nil
}

// GetResponse reads one response's detail (docs/api.md §4.4). A 404 matches
// survey.ErrNotFound: the response was removed. It implements
// pipeline.Fetcher.
func (c *Client) GetResponse(ctx context.Context, surveyID int64, responseID survey.GUID) (*survey.Response, error) {
	const op = OpGetResponse
	rid, err := survey.ParseGUID(string(responseID))
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, msg: "response id", cause: err}
	}
	u := c.base + "/surveys/" + strconv.FormatInt(surveyID, 10) + "/responses/" + string(rid)
	var out *survey.Response
	subject := "survey " + strconv.FormatInt(surveyID, 10) + " response " + string(rid)
	_, err = c.do(ctx, &request{op: op, method: http.MethodGet, url: u, subject: subject},
		func(_ int, reqID string, body []byte, ct string) (string, error) {
			names, _ := c.names.Get().(*interner)
			if names == nil {
				names = newInterner()
			}
			r, id, ok := fastResponse(body, names)
			c.names.Put(names)
			if id == "" {
				id = reqID
			}
			if !ok {
				var err error
				if r, id, err = decodeResult[survey.Response](reqID, body, ct, false); err != nil {
					return id, err
				}
			}
			if err := checkResponse(r, rid); err != nil {
				return id, err
			}
			out = r
			return id, nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Ping checks that the service accepts the token, cheaply: it lists one
// response of Options.PingSurveyID (survey 0 when unset). Any answer but 401
// proves the token valid (403 and 404 included); 402 and 5xx are errors.
// While the token is known to be rejected it does not call more often than
// the probe interval; during a quota pause it returns at once with
// ErrQuotaExceeded. For a readiness probe prefer Healthy, which costs no call.
func (c *Client) Ping(ctx context.Context) error {
	u := c.base + "/surveys/" + strconv.FormatInt(c.pingSurvey, 10) + "/responses?per_page=1"
	_, err := c.do(ctx, &request{op: OpPing, method: http.MethodGet, url: u, noWait: true},
		func(_ int, reqID string, _ []byte, _ string) (string, error) { return reqID, nil })
	if err == nil || errorIs404or403(err) {
		return nil
	}
	return err
}

func errorIs404or403(err error) bool {
	var ae *APIError
	ok := errors.As(err, &ae)
	return ok && (ae.Status == http.StatusNotFound || ae.Status == http.StatusForbidden)
}
