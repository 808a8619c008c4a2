package blob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

// Metadata keys written on every stored object (lower case: S3 folds
// header names). Values are UTF-8; on S3 each value is percent-encoded
// (url.PathEscape) so that headers stay ASCII, and decoded on read.
const (
	MetaSHA256     = "sha256"      // lower-case hex SHA-256 of the object's bytes
	MetaSize       = "size"        // decimal byte count
	MetaFileName   = "filename"    // original file name, UTF-8
	MetaSurveyID   = "survey-id"   // decimal
	MetaResponseID = "response-id" // lower-case GUID
	MetaQuestionID = "question-id" // decimal
	MetaFileID     = "file-id"     // lower-case GUID
)

// ErrNotExist is matched by the error of an operation on an object that is
// not in the store.
var ErrNotExist = errors.New("object does not exist")

// Attributes describe a stored object.
type Attributes struct {
	Size               int64
	ContentType        string
	ContentDisposition string
	Metadata           map[string]string // keys lower case, values decoded (UTF-8)
}

// Object is one entry of a listing.
type Object struct {
	Key  string
	Size int64
}

// StoreOptions says where objects go.
type StoreOptions struct {
	// URL of the bucket: file:///abs/dir (created when missing) or
	// s3://bucket?region=…&endpoint=…&use_path_style=true. Empty means
	// DefaultURL(DataDir).
	URL string
	// DataDir is the daemon's data folder; the default store is its "files"
	// subfolder.
	DataDir string
	// AccessKey and SecretKey are static S3 credentials (secrets: never
	// logged). Both empty: the AWS default chain (AWS_ACCESS_KEY_ID /
	// AWS_SECRET_ACCESS_KEY, shared config, instance role).
	AccessKey, SecretKey string
	// SessionToken goes with temporary static credentials; usually empty.
	SessionToken string
}

// backend is one kind of object store. put commits the object only when
// it returns nil: a failed or cancelled put leaves nothing under key.
type backend interface {
	attributes(ctx context.Context, key string) (Attributes, error)
	put(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes, p parts) error
	open(ctx context.Context, key string) (io.ReadCloser, error)
	list(ctx context.Context, prefix string) ([]Object, error)
	remove(ctx context.Context, key string) error
	close() error
}

// parts shapes uploads that go up in parts (S3 objects over singlePutMax).
type parts struct {
	size        int64
	concurrency int
}

// Defaults of parts: S3's minimum part size, two parts at once.
const (
	defaultPartSize        = 5 << 20
	defaultPartConcurrency = 2
)

// Store is an opened bucket plus the URL prefix that names its objects.
type Store struct {
	b    backend
	base string // scheme://host/path without query, no trailing slash
}

// DefaultURL is the store used when files.url is empty: dataDir/files.
func DefaultURL(dataDir string) (string, error) {
	if dataDir == "" {
		dataDir = "."
	}
	abs, err := filepath.Abs(filepath.Join(dataDir, "files"))
	if err != nil {
		return "", fmt.Errorf("blob: default store under %q: %w", dataDir, err)
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// unsupportedScheme is the explanation given for a files.url whose scheme
// is not file or s3 (gs://, azblob://, …); config says the same.
func unsupportedScheme(scheme string) string {
	return fmt.Sprintf("scheme %q is not supported: surveysync stores files in a local folder (file:///abs/dir) or in S3-compatible storage (s3://bucket?region=…); "+
		"for Google Cloud Storage use its S3-compatible endpoint (s3://bucket?endpoint=https://storage.googleapis.com&region=auto with HMAC keys), "+
		"for Azure Blob Storage an S3-compatible gateway such as versitygw's azure backend (see docs/files.md)", scheme)
}

// OpenStore opens the bucket at o.URL: file:// or s3:// (with any
// S3-compatible server: endpoint, region and path style come from the
// URL; docs/files.md lists the parameters).
func OpenStore(ctx context.Context, o StoreOptions) (*Store, error) {
	raw := o.URL
	if raw == "" {
		var err error
		if raw, err = DefaultURL(o.DataDir); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("blob: files url: %w", redactURLError(err))
	}
	var b backend
	switch u.Scheme {
	case "file":
		b, err = openFile(u)
	case "s3":
		b, err = openS3(ctx, u, o)
	default:
		return nil, fmt.Errorf("blob: files url %q: %s", u.Redacted(), unsupportedScheme(u.Scheme))
	}
	if err != nil {
		return nil, err
	}
	base := u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
	return &Store{b: b, base: base}, nil
}

func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New(ue.Err.Error())
	}
	return err
}

// checkKey refuses keys that could leave the bucket or clash with the
// store's own files.
func checkKey(key string) error {
	switch {
	case key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/"):
		return fmt.Errorf("blob: invalid object key %q", key)
	case strings.HasSuffix(key, attrsExt) || strings.HasSuffix(key, tmpExt):
		return fmt.Errorf("blob: object key %q: the suffixes %s and %s are reserved", key, attrsExt, tmpExt)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
			return fmt.Errorf("blob: invalid object key %q", key)
		}
	}
	return nil
}

// Attributes reads what the store knows about the object at key; the
// error matches ErrNotExist when there is none.
func (s *Store) Attributes(ctx context.Context, key string) (Attributes, error) {
	if err := checkKey(key); err != nil {
		return Attributes{}, err
	}
	return s.b.attributes(ctx, key)
}

// Put stores size bytes of body under key with a's content type,
// disposition and metadata (a.Size is ignored). The object appears only
// complete: on any error nothing is under key (an existing object stays
// as it was).
func (s *Store) Put(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes) error {
	return s.put(ctx, key, body, size, a, parts{})
}

func (s *Store) put(ctx context.Context, key string, body io.ReaderAt, size int64, a Attributes, p parts) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if p.size <= 0 {
		p.size = defaultPartSize
	}
	if p.concurrency <= 0 {
		p.concurrency = defaultPartConcurrency
	}
	return s.b.put(ctx, key, body, size, a, p)
}

// NewReader opens the object at key; the error matches ErrNotExist when
// there is none. The caller closes the reader.
func (s *Store) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return s.b.open(ctx, key)
}

// List returns the objects whose keys start with prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]Object, error) {
	return s.b.list(ctx, prefix)
}

// Delete removes the object at key. A missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.b.remove(ctx, key); err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	return nil
}

// Check writes a small object under surveysync-doctor/, reads it back and
// deletes it (surveysync doctor).
func (s *Store) Check(ctx context.Context) error {
	key := fmt.Sprintf("surveysync-doctor/%d", time.Now().UnixNano())
	body := []byte("ok")
	if err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), Attributes{ContentType: "text/plain"}); err != nil {
		return fmt.Errorf("write %s: %w", s.ObjectURL(key), err)
	}
	r, err := s.NewReader(ctx, key)
	if err == nil {
		var got []byte
		got, err = io.ReadAll(r)
		r.Close()
		if err == nil && !bytes.Equal(got, body) {
			err = fmt.Errorf("read %q, wrote %q", got, body)
		}
	}
	if err != nil {
		return fmt.Errorf("read back %s: %w", s.ObjectURL(key), err)
	}
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete %s: %w", s.ObjectURL(key), err)
	}
	return nil
}

// ObjectURL names key in the store, e.g. s3://bucket/surveys/1/… .
func (s *Store) ObjectURL(key string) string { return s.base + "/" + key }

// Close releases the store.
func (s *Store) Close() error { return s.b.close() }

// contentDisposition builds an RFC 6266 attachment header: always
// "attachment", so that a browser opening an object from the bucket saves
// it instead of rendering it; with a name, an ASCII fallback in filename=
// and the UTF-8 name in filename*= (RFC 5987 percent-encoding), so HTTP
// headers stay ASCII.
func contentDisposition(name string) string {
	if name == "" {
		return "attachment"
	}
	var fb strings.Builder
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || r == '"' || r == '\\':
			fb.WriteByte('_')
		case r < utf8.RuneSelf:
			fb.WriteRune(r)
		default:
			fb.WriteByte('_')
		}
	}
	return mime.FormatMediaType("attachment", map[string]string{"filename": fb.String()}) +
		"; filename*=UTF-8''" + rfc5987(name)
}

// rfc5987 percent-encodes s for an ext-value (RFC 5987 section 3.2.1):
// every byte but attr-char.
func rfc5987(s string) string {
	const attrChar = "!#$&+-.^_`|~"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(attrChar, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// storedContentType is the Content-Type an upload is stored with: the
// service's media type when it is one a browser does not run (an image, a
// PDF, a plain text …), application/octet-stream for any type a browser
// may render as a page or run — HTML, XHTML, SVG, XML of any kind,
// JavaScript, anything scripted — and for an unreadable or missing one.
// A respondent chooses what they upload: opened from a bucket, an HTML
// file would run in the bucket's origin. Of the parameters only a plain
// charset is kept (and dropped with a risky type).
func storedContentType(ct string) string {
	const safe = "application/octet-stream"
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.Contains(mt, "/") {
		return safe
	}
	if riskyMediaType(mt) {
		return safe
	}
	// Only a plain charset is kept of the parameters.
	keep := map[string]string{}
	if cs := params["charset"]; cs != "" && len(cs) <= 40 && strings.Trim(strings.ToLower(cs), "abcdefghijklmnopqrstuvwxyz0123456789-_.:") == "" {
		keep["charset"] = cs
	}
	if out := mime.FormatMediaType(mt, keep); out != "" {
		return out
	}
	return safe
}

// riskyMediaType reports whether a browser may render or run media type mt
// (lower case).
func riskyMediaType(mt string) bool {
	switch mt {
	case "text/xsl", "application/x-shockwave-flash", "text/cache-manifest", "application/wasm":
		return true
	}
	// text/html, application/xhtml+xml, image/svg+xml, text/xml, any
	// +xml, text/javascript, application/ecmascript, multipart/x-mixed-replace,
	// message/rfc822 (MHTML) …
	for _, s := range []string{"html", "script", "svg", "multipart/", "message/"} {
		if strings.Contains(mt, s) {
			return true
		}
	}
	// XML of any kind (text/xml, application/xml, any +xml), but not a
	// vendor type that only names XML (an Office document's
	// application/vnd.openxmlformats-…, a zip a browser downloads).
	_, sub, _ := strings.Cut(mt, "/")
	return sub == "xml" || strings.HasSuffix(sub, "+xml") || strings.HasPrefix(sub, "xml-")
}

// cleanFileName keeps the base name of what the service sent, valid UTF-8,
// without control characters.
func cleanFileName(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return strings.TrimSpace(name)
}
