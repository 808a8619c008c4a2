package blob

import (
	"context"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/surveysync/surveysync/pipeline/files"
)

// An upload is a respondent's file: every object is stored with
// Content-Disposition: attachment (with its name when known, RFC 5987
// encoded), and a type a browser would render or run is stored as
// application/octet-stream. On S3 (versitygw) the headers are read back
// raw with HeadObject; the file store records the same in its sidecar.
func TestUploadsStoredAsAttachments(t *testing.T) {
	cases := []struct {
		ctype, name        string
		wantType, wantDisp string
		size               int64
	}{
		{"text/html; charset=utf-8", "", "application/octet-stream", "attachment", 100},
		{"text/html", "cv.html", "application/octet-stream", `attachment; filename=cv.html; filename*=UTF-8''cv.html`, 100},
		{"image/svg+xml", "logo.svg", "application/octet-stream", `attachment; filename=logo.svg; filename*=UTF-8''logo.svg`, 100},
		{"application/xhtml+xml", "", "application/octet-stream", "attachment", 100},
		{"text/javascript", "", "application/octet-stream", "attachment", 100},
		{"application/xml", "", "application/octet-stream", "attachment", 100},
		{"TEXT/HTML", "", "application/octet-stream", "attachment", 100},
		{"not a type", "", "application/octet-stream", "attachment", 100},
		{"", "", "application/octet-stream", "attachment", 100},
		{"image/png", "a=b;c,d@e.png", "image/png", `attachment; filename="a=b;c,d@e.png"; filename*=UTF-8''a%3Db%3Bc%2Cd%40e.png`, 100},
		{"application/pdf", czechName, "application/pdf",
			`attachment; filename="P_ihl__ka _ _ivotopis.pdf"; filename*=UTF-8''P%C5%99ihl%C3%A1%C5%A1ka%20%E2%80%93%20%C5%BEivotopis.pdf`, 100},
		{"text/plain; charset=utf-8", "", "text/plain; charset=utf-8", "attachment", 100},
		// Multipart upload on S3 (singlePut lowered below).
		{"text/html", "big.html", "application/octet-stream", `attachment; filename=big.html; filename*=UTF-8''big.html`, 6 << 20},
	}
	stores(t, func(t *testing.T, st *Store) {
		if b, ok := st.b.(*s3Backend); ok {
			b.singlePut = 5 << 20
		}
		srv := newFileServer(t)
		c := NewCopier(st, srv.downloader(), nil, testOptions(t))
		for i, tc := range cases {
			r := files.FileRef{SurveyID: 4574, ResponseID: guid(0xda453b67, 1), QuestionID: int64(10 + i), FileID: guid(0xa77a0000, i)}
			srv.add(r.FileID, fileSpec{size: tc.size, name: tc.name, ctype: tc.ctype})
			got, err := c.Copy(context.Background(), r)
			if err != nil {
				t.Fatalf("%q: %v", tc.ctype, err)
			}
			if got.ContentType != tc.wantType {
				t.Errorf("%q: recorded type %q, want %q", tc.ctype, got.ContentType, tc.wantType)
			}
			a, err := st.Attributes(context.Background(), r.Key())
			if err != nil {
				t.Fatal(err)
			}
			if a.ContentType != tc.wantType || a.ContentDisposition != tc.wantDisp {
				t.Errorf("%q %q: stored Content-Type %q, Content-Disposition %q; want %q, %q", tc.ctype, tc.name, a.ContentType, a.ContentDisposition, tc.wantType, tc.wantDisp)
			}
			if _, params, err := mime.ParseMediaType(a.ContentDisposition); err != nil || (tc.name != "" && params["filename"] != tc.name && !strings.Contains(tc.name, "–")) {
				t.Errorf("%q: Content-Disposition %q parses as %v, %v", tc.name, a.ContentDisposition, params, err)
			}
			if b, ok := st.b.(*s3Backend); ok {
				out, err := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(b.bucket), Key: aws.String(r.Key())})
				if err != nil {
					t.Fatal(err)
				}
				if aws.ToString(out.ContentType) != tc.wantType || aws.ToString(out.ContentDisposition) != tc.wantDisp {
					t.Errorf("HeadObject %q: Content-Type %q, Content-Disposition %q", tc.ctype, aws.ToString(out.ContentType), aws.ToString(out.ContentDisposition))
				}
			}
		}
	})
}

func TestStoredContentType(t *testing.T) {
	for in, want := range map[string]string{
		"image/jpeg":                     "image/jpeg",
		"Image/PNG":                      "image/png",
		"application/pdf":                "application/pdf",
		"text/csv; charset=windows-1250": "text/csv; charset=windows-1250",
		"text/html":                      "application/octet-stream",
		"text/html; charset=utf-8":       "application/octet-stream",
		"application/xhtml+xml":          "application/octet-stream",
		"image/svg+xml":                  "application/octet-stream",
		"application/atom+xml":           "application/octet-stream",
		"application/javascript":         "application/octet-stream",
		"text/ecmascript":                "application/octet-stream",
		"multipart/x-mixed-replace":      "application/octet-stream",
		"message/rfc822":                 "application/octet-stream",
		"application/x-shockwave-flash":  "application/octet-stream",
		"text/xsl":                       "application/octet-stream",
		"text/xml":                       "application/octet-stream",
		"application/xml-dtd":            "application/octet-stream",
		"application/vnd.openxmlformats-officedocument.wordprocessingml.document": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
		"":                             "application/octet-stream",
		"html":                         "application/octet-stream",
		"text/plain; charset=\"\x01\"": "text/plain",
		"image/png; name=x.html":       "image/png",
	} {
		if got := storedContentType(in); got != want {
			t.Errorf("storedContentType(%q) = %q, want %q", in, got, want)
		}
	}
}

// Go's own parser reads the name back from filename*.
func TestContentDispositionRoundTrips(t *testing.T) {
	for _, name := range []string{czechName, "a=b;c,d@e.png", `quo"te\back.txt`, "日本語.docx", "x y+z%20.pdf"} {
		h := contentDisposition(name)
		for _, c := range h {
			if c > 0x7e || c < 0x20 {
				t.Fatalf("%q: non-ASCII or control character in %q", name, h)
			}
		}
		_, params, err := mime.ParseMediaType(h)
		if err != nil || params["filename"] != name {
			t.Errorf("%q: %q parses as %v, %v", name, h, params, err)
		}
	}
	w := http.Header{}
	w.Set("Content-Disposition", contentDisposition(""))
	if w.Get("Content-Disposition") != "attachment" {
		t.Errorf("nameless: %q", w.Get("Content-Disposition"))
	}
}

// The file store creates objects and sidecars 0600 and folders 0750,
// whatever the umask lets through.
func TestFileStoreModes(t *testing.T) {
	st, dir := fileStore(t)
	srv := newFileServer(t)
	c := NewCopier(st, srv.downloader(), nil, testOptions(t))
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002")
	srv.add(r.FileID, fileSpec{size: 10, name: "x.pdf", ctype: "application/pdf"})
	if _, err := c.Copy(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o750
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", p, fi.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("walked %d entries: the object and its sidecar are missing", n)
	}
}
