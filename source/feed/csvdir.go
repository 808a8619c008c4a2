package feed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/surveysync/surveysync/internal/atomicfile"
)

const (
	dirProcessing = "processing"
	dirDone       = "done"
	dirFailed     = "failed"
)

// FileReport is the report written beside a processed file
// (done/NAME.report.json or failed/NAME.report.json). Problems lists every
// row that was invalid, failed or uncertain; skipped rows are only counted.
type FileReport struct {
	Feed       string      `json:"feed"`
	File       string      `json:"file"` // original name
	Claimed    string      `json:"claimed"`
	StartedAt  time.Time   `json:"started_at"`
	FinishedAt time.Time   `json:"finished_at"`
	Error      string      `json:"error,omitempty"` // why the file went to failed/
	Summary    Summary     `json:"summary"`
	Problems   []RowResult `json:"problems"`
}

type csvDir struct {
	f *feed
}

func (d csvDir) path(parts ...string) string {
	return filepath.Join(append([]string{d.f.opts.CSVDir.Dir}, parts...)...)
}

func (d csvDir) prepare() error {
	// The drop folder itself is the operator's: a missing one is a
	// configuration mistake, not something to create silently.
	if err := CheckDir(d.f.opts.CSVDir.Dir); err != nil {
		return fmt.Errorf("feed %s: %w", d.f.opts.Name, err)
	}
	for _, sub := range []string{dirProcessing, dirDone, dirFailed} {
		if err := privateDir(d.path(sub)); err != nil {
			return fmt.Errorf("feed %s: %w", d.f.opts.Name, err)
		}
	}
	return nil
}

// Modes of what a csv_dir feed creates: the files hold personal data (the
// rows, the reports' keys and reasons), so only the daemon's user reads
// them, as for everything else surveysync writes.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// privateDir creates dir with dirMode, or takes away the world's access to
// an existing one (a folder created 0755 by an earlier version ends 0750:
// a group the operator gave it keeps its access).
func privateDir(dir string) error {
	if err := os.Mkdir(dir, dirMode); err == nil || !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); fi.IsDir() && perm&0o007 != 0 {
		return os.Chmod(dir, perm&^0o007)
	}
	return nil
}

// candidate reports whether a file name in the drop folder is to be claimed:
// not hidden, not a partial upload (.part, .tmp), a .csv, .txt, .jsonl or
// .ndjson file. Writers should write under another name and rename in.
func candidate(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "~") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv", ".txt", ".jsonl", ".ndjson":
		return true
	}
	return false
}

// poll processes the files left in processing/ (an interrupted run), then
// claims and processes the new files of the folder, oldest first.
func (d csvDir) poll(ctx context.Context) error {
	if err := d.prepare(); err != nil {
		return err
	}
	resume, err := d.list(d.path(dirProcessing), func(n string) bool { return !strings.HasPrefix(n, ".") && !strings.HasSuffix(n, ".problems") })
	if err != nil {
		return err
	}
	for _, name := range resume {
		d.f.log.Info("feed: resuming interrupted file", "feed", d.f.opts.Name, "file", name)
		if err := d.process(ctx, name); err != nil {
			return err
		}
	}
	fresh, err := d.list(d.path(), candidate)
	if err != nil {
		return err
	}
	for _, name := range fresh {
		if err := ctx.Err(); err != nil {
			return err
		}
		claimed, err := d.claim(name)
		if err != nil {
			d.f.log.Warn("feed: cannot claim file", "feed", d.f.opts.Name, "file", name, "err", err)
			continue
		}
		if err := d.process(ctx, claimed); err != nil {
			return err
		}
	}
	return nil
}

// list returns the regular files of dir accepted by keep, oldest first.
func (d csvDir) list(dir string, keep func(string) bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("feed %s: %w", d.f.opts.Name, err)
	}
	type fe struct {
		name string
		mod  time.Time
	}
	var files []fe
	for _, e := range ents {
		if !e.Type().IsRegular() || !keep(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		files = append(files, fe{e.Name(), info.ModTime()})
	}
	sort.Slice(files, func(i, j int) bool {
		if !files[i].mod.Equal(files[j].mod) {
			return files[i].mod.Before(files[j].mod)
		}
		return files[i].name < files[j].name
	})
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.name
	}
	return out, nil
}

// claim renames a dropped file into processing/ under a unique name
// (claim time + original name). The rename is atomic: two processes cannot
// both claim one file. The claimed name is the batch id's file part, stable
// across a resume.
func (d csvDir) claim(name string) (string, error) {
	claimed := d.f.now().UTC().Format("20060102T150405.000000000Z") + "_" + name
	if err := os.Rename(d.path(name), d.path(dirProcessing, claimed)); err != nil {
		return "", err
	}
	return claimed, nil
}

func originalName(claimed string) string {
	if i := strings.IndexByte(claimed, '_'); i >= 0 {
		return claimed[i+1:]
	}
	return claimed
}

func (d csvDir) batchID(claimed string) string { return "file:" + claimed }

// openRows opens a claimed file as rows by its extension.
func (d csvDir) openRows(path string) (rowIter, io.Closer, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson":
		return jsonlRows(fh, d.f.opts.CSVDir.MaxRecordBytes), fh, nil
	default:
		rows, err := csvRows(fh, d.f.opts.CSVDir.Delimiter, d.f.opts.CSVDir.MaxRecordBytes, d.f.mapper)
		if err != nil {
			fh.Close()
			return nil, nil, err
		}
		return rows, fh, nil
	}
}

// process runs one claimed file as a batch. An unreadable file goes to
// failed/; a file read to its end goes to done/ even when rows failed. When
// the batch stops on an error (ctx ended, ledger down) the file stays in
// processing/ and is resumed later.
func (d csvDir) process(ctx context.Context, claimed string) error {
	f := d.f
	path := d.path(dirProcessing, claimed)
	started := f.now().UTC()
	problemsPath := d.path(dirProcessing, "."+claimed+".problems")
	pf, err := os.OpenFile(problemsPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fileMode)
	if err != nil {
		return fmt.Errorf("feed %s: %w", f.opts.Name, err)
	}
	pw := bufio.NewWriter(pf)
	enc := json.NewEncoder(pw)
	closeProblems := func() { pf.Close(); os.Remove(problemsPath) }
	emit := func(r RowResult) {
		if r.Outcome == OutcomeInvalid || r.Outcome == OutcomeFailed || r.Outcome == OutcomeUncertain {
			_ = enc.Encode(r) // into pw, a bufio.Writer: its sticky error surfaces at its Flush
		}
	}
	rows, closer, err := d.openRows(path)
	var sum Summary
	if err == nil {
		sum, err = f.runBatch(ctx, d.batchID(claimed), claimed, rows, emit, false)
		closer.Close()
	}
	var ur *errUnreadable
	if err != nil && !errors.As(err, &ur) {
		closeProblems()
		if ctx.Err() == nil {
			f.log.Error("feed: file interrupted; it stays in processing/ and is resumed", "feed", f.opts.Name, "file", claimed, "err", err)
		}
		return err
	}
	if err := pw.Flush(); err != nil {
		closeProblems()
		return fmt.Errorf("feed %s: problems of %s: %w", f.opts.Name, claimed, err)
	}
	rep := FileReport{Feed: f.opts.Name, File: originalName(claimed), Claimed: claimed, StartedAt: started,
		FinishedAt: f.now().UTC(), Summary: sum}
	dest, outcome := dirDone, FileDone
	if err != nil {
		dest, outcome = dirFailed, FileFailed
		rep.Error = err.Error()
	}
	if werr := d.writeReport(d.path(dest, claimed+".report.json"), &rep, pf); werr != nil {
		closeProblems()
		return fmt.Errorf("feed %s: report of %s: %w", f.opts.Name, claimed, werr)
	}
	closeProblems()
	if err := os.Rename(path, d.path(dest, claimed)); err != nil {
		return fmt.Errorf("feed %s: move %s to %s/: %w", f.opts.Name, claimed, dest, err)
	}
	f.m.files.WithLabelValues(f.opts.Name, outcome).Inc()
	f.log.Info("feed: file processed", "feed", f.opts.Name, "file", claimed, "outcome", outcome,
		"rows", sum.Rows, "pushed", sum.Pushed, "skipped", sum.Skipped, "failed", sum.Failed,
		"invalid", sum.Invalid, "uncertain", sum.Uncertain, "error", rep.Error)
	return nil
}

// writeReport writes rep with the problems streamed from pf (JSON lines),
// atomically (internal/atomicfile).
func (d csvDir) writeReport(path string, rep *FileReport, pf *os.File) error {
	head, err := json.MarshalIndent(struct {
		Feed       string    `json:"feed"`
		File       string    `json:"file"`
		Claimed    string    `json:"claimed"`
		StartedAt  time.Time `json:"started_at"`
		FinishedAt time.Time `json:"finished_at"`
		Error      string    `json:"error,omitempty"`
		Summary    Summary   `json:"summary"`
	}{rep.Feed, rep.File, rep.Claimed, rep.StartedAt, rep.FinishedAt, rep.Error, rep.Summary}, "", "  ")
	if err != nil {
		return err
	}
	if _, err := pf.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return atomicfile.Write(path, fileMode, func(out *os.File) error {
		w := bufio.NewWriter(out)
		// bufio.Writer's errors are sticky: Flush below reports the first.
		_, _ = w.Write(head[:len(head)-1]) // drop the closing brace
		_, _ = w.WriteString(",\n  \"problems\": [")
		sc := bufio.NewScanner(pf)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for first := true; sc.Scan(); first = false {
			if !first {
				_ = w.WriteByte(',')
			}
			_, _ = w.WriteString("\n    ")
			_, _ = w.Write(sc.Bytes())
		}
		if err := sc.Err(); err != nil {
			return err
		}
		_, _ = w.WriteString("\n  ]\n}\n")
		return w.Flush()
	})
}

// ReadFileReport reads a report written by a csv_dir feed.
func ReadFileReport(path string) (*FileReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r FileReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// CheckDir checks that a csv_dir feed's drop folder exists, is a folder
// and can be read; the error names it.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("csv_dir.dir %s does not exist (create it, or point csv_dir.dir at the folder files are dropped into)", dir)
	case err != nil:
		return fmt.Errorf("csv_dir.dir %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("csv_dir.dir %s is not a folder", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("csv_dir.dir %s cannot be read: %w", dir, err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("csv_dir.dir %s cannot be read: %w", dir, err)
	}
	return nil
}
