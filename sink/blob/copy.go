package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/files"
	"github.com/surveysync/surveysync/survey"
)

// Copy copies one file now, unless it is already stored, and returns where
// it is. It does not touch the index or the queue. The object appears under
// its final key only complete: the download is spooled and hashed first,
// then written from the spool in one upload that commits on success only
// (Store.Put).
func (c *Copier) Copy(ctx context.Context, ref files.FileRef) (Stored, error) {
	key := ref.Key()
	st := Stored{FileRef: ref, ObjectURL: c.st.ObjectURL(key)}
	attrs, err := c.st.Attributes(ctx, key)
	switch {
	case err == nil:
		if prev, ok := storedFrom(attrs); ok {
			prev.FileRef, prev.ObjectURL = ref, st.ObjectURL
			if !c.o.VerifyExisting {
				return prev, nil
			}
			d, err := c.download(ctx, ref)
			if err != nil {
				return st, err
			}
			_ = d.Body.Close()
			if d.Size <= 0 || d.Size == prev.Size {
				return prev, nil
			}
			// The service serves another size: copy again.
		}
	case !errors.Is(err, ErrNotExist):
		return st, &CopyError{ref, ReasonStore, fmt.Errorf("read attributes of %s: %w", st.ObjectURL, err)}
	}

	d, err := c.download(ctx, ref)
	if err != nil {
		return st, err
	}
	defer d.Body.Close()
	if c.o.MaxSize > 0 && d.Size > c.o.MaxSize {
		return st, &CopyError{ref, ReasonTooLarge, permanent.Errorf("too_large", "%w: Content-Length %d > %d bytes", ErrTooLarge, d.Size, c.o.MaxSize)}
	}

	sp := newSpool(c.o.SpoolDir, c.o.MemSpool, &c.spoolPool)
	defer sp.Close()
	h := sha256.New()
	var src io.Reader = d.Body
	if c.o.MaxSize > 0 {
		src = io.LimitReader(d.Body, c.o.MaxSize+1)
	}
	bufp := c.copyPool.Get().(*[]byte)
	sw := &spoolWriter{sp: sp, h: h}
	n, err := io.CopyBuffer(sw, src, *bufp)
	c.copyPool.Put(bufp)
	if err != nil {
		if sw.err != nil {
			return st, &CopyError{ref, ReasonSpool, sw.err}
		}
		if ctx.Err() != nil {
			return st, &CopyError{ref, ReasonDownload, ctx.Err()}
		}
		return st, &CopyError{ref, ReasonDownload, fmt.Errorf("read body after %d bytes: %w", n, err)}
	}
	if c.o.MaxSize > 0 && n > c.o.MaxSize {
		return st, &CopyError{ref, ReasonTooLarge, permanent.Errorf("too_large", "%w: more than %d bytes", ErrTooLarge, c.o.MaxSize)}
	}
	if d.Size > 0 && n != d.Size {
		return st, &CopyError{ref, ReasonTruncated, fmt.Errorf("%w: got %d of %d bytes", ErrTruncated, n, d.Size)}
	}

	st.Size = n
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	st.FileName = cleanFileName(d.FileName)
	// Stored (and recorded in the index) as served from the store: a
	// type a browser may render or run becomes application/octet-stream,
	// and every object is an attachment (store.go).
	st.ContentType = storedContentType(d.ContentType)
	err = c.st.put(ctx, key, sp.ReaderAt(), n, Attributes{
		ContentType:        st.ContentType,
		ContentDisposition: contentDisposition(st.FileName),
		Metadata:           metadata(st),
	}, parts{size: int64(c.o.PartSize), concurrency: c.o.PartConcurrency})
	if err != nil {
		return st, &CopyError{ref, ReasonStore, fmt.Errorf("write %s: %w", st.ObjectURL, err)}
	}
	return st, nil
}

func (c *Copier) download(ctx context.Context, ref files.FileRef) (*Download, error) {
	d, err := c.dl.DownloadFile(ctx, ref.SurveyID, ref.ResponseID, ref.FileID)
	if err != nil {
		reason := ReasonDownload
		if errors.Is(err, survey.ErrNotFound) {
			reason = ReasonNotFound
		}
		return nil, &CopyError{ref, reason, err}
	}
	if d == nil || d.Body == nil {
		return nil, &CopyError{ref, ReasonDownload, errors.New("downloader returned no body")}
	}
	return d, nil
}

// metadata is the object metadata of st.
func metadata(st Stored) map[string]string {
	md := map[string]string{
		MetaSHA256:     st.SHA256,
		MetaSize:       strconv.FormatInt(st.Size, 10),
		MetaSurveyID:   strconv.FormatInt(st.SurveyID, 10),
		MetaResponseID: string(st.ResponseID),
		MetaQuestionID: strconv.FormatInt(st.QuestionID, 10),
		MetaFileID:     string(st.FileID),
	}
	if st.FileName != "" {
		md[MetaFileName] = st.FileName
	}
	return md
}

type spoolWriter struct {
	sp  *spool
	h   io.Writer
	err error
}

func (w *spoolWriter) Write(p []byte) (int, error) {
	_, _ = w.h.Write(p) // a hash.Hash never fails
	n, err := w.sp.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// storedFrom reads what an object's metadata says about it. ok is false
// unless the object carries our SHA-256 and its size matches the metadata:
// only then was it written completely by a copier.
func storedFrom(a Attributes) (Stored, bool) {
	md := a.Metadata
	sum := md[MetaSHA256]
	size, err := strconv.ParseInt(md[MetaSize], 10, 64)
	if len(sum) != 64 || err != nil || size != a.Size {
		return Stored{}, false
	}
	return Stored{
		FileName:    md[MetaFileName],
		ContentType: a.ContentType,
		Size:        a.Size,
		SHA256:      sum,
		Skipped:     true,
	}, true
}
