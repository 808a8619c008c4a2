package surveyapi

import (
	"context"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/surveysync/surveysync/survey"
)

// File is an uploaded file being downloaded. Body streams from the network:
// the caller reads it and must Close it.
type File struct {
	Body        io.ReadCloser
	ContentType string // as sent; "" when the service sent none
	FileName    string // from Content-Disposition (filename*, RFC 5987 UTF-8, preferred over filename), base name only; "" when none
	Size        int64  // Content-Length, -1 when unknown
}

// DownloadFile opens a file a respondent uploaded (docs/api.md §4.5 and
// section 10). Retries and limits apply until the headers arrive;
// then the body streams without holding a concurrency slot (the caller
// bounds its own downloads), and Options.Timeout applies to each Read that
// waits for data, not to the whole transfer. An error while reading the
// body matches ErrNetwork (ErrTimeout for a stall); download again.
func (c *Client) DownloadFile(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*File, error) {
	const op = OpDownloadFile
	rid, err := survey.ParseGUID(string(responseID))
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, msg: "response id", cause: err}
	}
	fid, err := survey.ParseGUID(string(fileID))
	if err != nil {
		return nil, &callError{op: op, kind: ErrInvalidArgument, msg: "file id", cause: err}
	}
	u := c.base + "/surveys/" + strconv.FormatInt(surveyID, 10) + "/responses/" + string(rid) +
		"/uploaded-files/" + string(fid)
	resp, err := c.do(ctx, &request{op: op, method: http.MethodGet, url: u, stream: true}, nil)
	if err != nil {
		return nil, err
	}
	return &File{
		Body:        resp.Body,
		ContentType: resp.Header.Get("Content-Type"),
		FileName:    fileName(resp.Header.Get("Content-Disposition")),
		Size:        resp.ContentLength,
	}, nil
}

// fileName extracts a safe base name from a Content-Disposition value.
// mime.ParseMediaType decodes RFC 2231/5987 filename* (UTF-8) and prefers it
// over filename; values it rejects (e.g. an unquoted name with spaces) are
// read leniently.
func fileName(cd string) string {
	if cd == "" {
		return ""
	}
	var name string
	if _, params, err := mime.ParseMediaType(cd); err == nil {
		name = params["filename"]
	} else {
		name = lenientFileName(cd)
	}
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	if name == "." || name == ".." {
		return ""
	}
	return name
}

func lenientFileName(cd string) string {
	var plain string
	for _, part := range strings.Split(cd, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch k {
		case "filename*":
			// charset'lang'percent-encoded
			if i := strings.LastIndex(v, "'"); i >= 0 {
				if s, err := urlUnescape(v[i+1:]); err == nil {
					return s
				}
			}
		case "filename":
			plain = v
		}
	}
	return plain
}

func urlUnescape(s string) (string, error) { return url.PathUnescape(s) }
