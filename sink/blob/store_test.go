package blob

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/surveysync/surveysync/internal/backoff"
	"github.com/surveysync/surveysync/internal/testkit/blobtest"
)

// The doctor's round trip works on both stores and leaves nothing behind.
func TestStoreCheck(t *testing.T) {
	stores(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		if err := st.Check(ctx); err != nil {
			t.Fatal(err)
		}
		left, err := st.List(ctx, "surveysync-doctor/")
		if err != nil || len(left) != 0 {
			t.Fatalf("after Check: %v objects left, err %v", left, err)
		}
		if _, err := st.NewReader(ctx, "surveysync-doctor/none"); !errors.Is(err, ErrNotExist) {
			t.Errorf("reading a missing object: %v, want ErrNotExist", err)
		}
		if err := st.Delete(ctx, "surveysync-doctor/none"); err != nil {
			t.Errorf("deleting a missing object: %v, want nil", err)
		}
	})
}

// gs:// and azblob:// are refused with what is supported and the way
// around (an S3-compatible endpoint or gateway).
func TestOpenStoreRefusesOtherSchemes(t *testing.T) {
	for _, u := range []string{"gs://bucket", "azblob://container", "ftp://host/dir"} {
		_, err := OpenStore(context.Background(), StoreOptions{URL: u})
		if err == nil || !strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), "S3-compatible") || !strings.Contains(err.Error(), "file://") {
			t.Errorf("OpenStore(%s) = %v", u, err)
		}
	}
}

func TestOpenS3URLParameters(t *testing.T) {
	ctx := context.Background()
	for u, want := range map[string]string{
		"s3://b?region=eu-west-1&colour=blue":           `unknown query parameter "colour"`,
		"s3://b?region=eu-west-1&use_path_style=maybe":  "invalid use_path_style",
		"s3://b?region=eu-west-1&ssetype=rot13":         "invalid ssetype",
		"s3://b?region=eu-west-1&role=admin":            "invalid role",
		"s3://b?endpoint=127.0.0.1:9&region=us-east-1":  "invalid endpoint",
		"s3://?region=us-east-1":                        "needs a bucket name",
		"s3://b?request_checksum_calculation=sometimes": "invalid request_checksum_calculation",
	} {
		if _, err := OpenStore(ctx, StoreOptions{URL: u}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenStore(%s) = %v, want an error with %q", u, err, want)
		}
	}
	st, err := OpenStore(ctx, StoreOptions{
		URL:       "s3://b?endpoint=http://127.0.0.1:9&region=us-east-1&use_path_style=true&disable_https=true&ssetype=AES256&request_checksum_calculation=when_required&response_checksum_validation=when_required&rate_limiter_capacity=10&awssdk=v2",
		AccessKey: "k", SecretKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	b := st.b.(*s3Backend)
	if !b.client.Options().UsePathStyle || b.checksums || b.sse != "AES256" || st.ObjectURL("k") != "s3://b/k" {
		t.Errorf("options not applied: path style %v, checksums %v, sse %q, url %s", b.client.Options().UsePathStyle, b.checksums, b.sse, st.ObjectURL("k"))
	}
	if _, err := OpenStore(ctx, StoreOptions{URL: "s3://b?region=us-east-1", AccessKey: "k"}); err == nil {
		t.Error("an access key without a secret was accepted")
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"", "/a", "a/", "a//b", "a/../b", "..", "a/./b", "a.attrs", "a.tmp", `a\b`} {
		if checkKey(k) == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	if err := checkKey("surveys/1/responses/x/y"); err != nil {
		t.Error(err)
	}
}

// An object written by earlier versions (gocloud.dev's fileblob: the file
// and a "<key>.attrs" JSON sidecar) is recognised as stored: no download.
func TestLegacyFileObjectIsStored(t *testing.T) {
	st, dir := fileStore(t)
	fs := newFileServer(t)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-0000000001e9")
	fs.add(r.FileID, fileSpec{size: 3000, name: czechName, ctype: "application/pdf"})
	sum := sha256Of(r.FileID, 3000)
	p := filepath.Join(dir, filepath.FromSlash(r.Key()))
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(contentOf(r.FileID, 3000))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	// As fileblob v0.47 wrote it (json.Encoder, md5 included).
	legacy := `{"user.cache_control":"","user.content_disposition":"attachment; filename=\"P_ihl__ka _ _ivotopis.pdf\"; filename*=UTF-8''P%C5%99ihl%C3%A1%C5%A1ka%20%E2%80%93%20%C5%BEivotopis.pdf","user.content_encoding":"","user.content_language":"","user.content_type":"application/pdf","user.metadata":{"file-id":"` +
		string(r.FileID) + `","filename":"` + czechName + `","question-id":"7","response-id":"` + string(r.ResponseID) + `","sha256":"` + sum + `","size":"3000","survey-id":"1"},"md5":"AAAAAAAAAAAAAAAAAAAAAA=="}` + "\n"
	if err := os.WriteFile(p+".attrs", []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewCopier(st, fs.downloader(), nil, testOptions(t))
	got, err := c.Copy(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Skipped || got.SHA256 != sum || got.FileName != czechName || got.ContentType != "application/pdf" || fs.requests.Load() != 0 {
		t.Errorf("legacy object: %+v after %d downloads, want skipped without one", got, fs.requests.Load())
	}
	objs, err := st.List(context.Background(), "surveys/1/")
	if err != nil || len(objs) != 1 || objs[0].Key != r.Key() || objs[0].Size != 3000 {
		t.Errorf("List = %+v, %v; want the one object, no sidecar", objs, err)
	}
}

// A file over the single-PUT limit (lowered here from 5 GiB) goes to S3 as
// a multipart upload from the spool: byte-identical, metadata intact, no
// upload left open.
func TestS3MultipartUpload(t *testing.T) {
	v := blobtest.Start(t)
	st := s3Store(t, v, "multipart")
	st.b.(*s3Backend).singlePut = 5 << 20
	fs := newFileServer(t)
	r := ref(1, "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-0000000a1100")
	size := int64(12<<20 + 12345)
	fs.add(r.FileID, fileSpec{size: size, name: czechName, ctype: "application/pdf"})
	c := NewCopier(st, fs.downloader(), nil, testOptions(t))
	got, err := c.Copy(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256Of(r.FileID, size)
	if sum, n := readSHA(t, st, r.Key()); sum != want || n != size || got.SHA256 != want {
		t.Fatalf("object sha %s size %d, copy %+v; want %s", sum, n, got, want)
	}
	a, err := st.Attributes(context.Background(), r.Key())
	if err != nil || a.Metadata[MetaFileName] != czechName || a.Metadata[MetaSHA256] != want || a.ContentType != "application/pdf" {
		t.Errorf("attributes %+v, %v", a, err)
	}
	out, err := st.b.(*s3Backend).client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String("multipart")})
	if err != nil || len(out.Uploads) != 0 {
		t.Errorf("open multipart uploads: %v, %v", out, err)
	}
	// A second copy finds it stored.
	again, err := c.Copy(context.Background(), r)
	if err != nil || !again.Skipped {
		t.Errorf("second copy %+v, %v; want skipped", again, err)
	}
}

// The copier's wait between attempts is internal/backoff's schedule with
// its equal jitter: within [Step/2, Step] of the attempt count.
func TestRetryWaitIsTheBackoffSchedule(t *testing.T) {
	st, _ := fileStore(t)
	o := testOptions(t)
	o.RetryInitial, o.RetryMax = time.Second, time.Hour
	c := NewCopier(st, nil, nil, o)
	p := backoff.Policy{Initial: time.Second, Max: time.Hour}
	for n := 1; n <= 20; n++ {
		for range 50 {
			if d := c.retryWait(n); d < p.Step(n)/2 || d > p.Step(n) {
				t.Fatalf("retryWait(%d) = %v, want within [%v, %v]", n, d, p.Step(n)/2, p.Step(n))
			}
		}
	}
	if c.retryWait(20) > time.Hour {
		t.Error("the wait exceeds RetryMax")
	}
}
