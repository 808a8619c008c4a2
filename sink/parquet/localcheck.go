package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/surveysync/surveysync/internal/kvstore"
)

// LocalFile is what CheckLocalState found of one local file.
type LocalFile struct {
	Path string
	// Err is nil when the file reads whole (or is absent).
	Err error
	// Refused: run refuses while it is so (Err names the fix); else run
	// moves it aside at start and Lost says what that costs.
	Refused bool
	Lost    string
	// InUse: a running process holds it (a bbolt file); not checked.
	InUse bool
}

// CheckLocalState reads every file under dir that the daemon reads at
// start, changing nothing (surveysync doctor): the state files, the
// rejects files, the erasures log, the feed ledger and the uploaded-files
// index (docs/operations.md, "Damaged local state"). Absent files are not
// listed. held says a daemon holds the folder: the bbolt files, which it
// holds open, are then listed InUse without waiting for them.
func CheckLocalState(ctx context.Context, dir string, held bool) []LocalFile {
	var out []LocalFile
	state := filepath.Join(dir, stateDirName)
	for _, name := range []string{statesFile, surveysFile} {
		path := filepath.Join(state, name)
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			var v map[string]any
			err = json.Unmarshal(raw, &v)
		}
		out = append(out, LocalFile{Path: path, Err: err, Lost: stateRebuilt[name]})
	}
	rejects, _ := filepath.Glob(filepath.Join(dir, rejectsDirName, "*.jsonl"))
	for _, path := range rejects {
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			_, err = rejectEntries(raw)
		}
		out = append(out, LocalFile{Path: path, Err: err, Lost: rejectsLost})
	}
	if path := filepath.Join(state, verifyRunsFile); exists(path) {
		f := LocalFile{Path: path, Lost: verifyRunsLost}
		if raw, err := os.ReadFile(path); err != nil {
			f.Err = err
		} else {
			for n, line := range bytes.Split(raw, []byte("\n")) {
				var e verifyRunEntry
				if len(bytes.TrimSpace(line)) > 0 && json.Unmarshal(line, &e) != nil && !tornJSON(line) {
					f.Err = fmt.Errorf("line %d does not decode", n+1)
					break
				}
			}
		}
		out = append(out, f)
	}
	w := &dirWarehouse{Sink: &Sink{dir: dir, log: slog.New(slog.DiscardHandler)}}
	if path := filepath.Join(state, privacyFile); exists(path) {
		_, err := w.PrivacyRules(ctx)
		out = append(out, LocalFile{Path: path, Err: err, Refused: true})
	}
	if path := filepath.Join(state, erasuresFile); exists(path) {
		_, err := w.Erasures(ctx)
		out = append(out, LocalFile{Path: path, Err: err, Refused: true})
	}
	for _, db := range []struct {
		path, what string
		damaged    func(string, error) error
	}{
		{filepath.Join(dir, "_feeds", ledgerDBName), "feed ledger", ledgerDamaged},
		{filepath.Join(dir, "uploaded_files.db"), "file index", indexDamaged},
	} {
		if !exists(db.path) {
			continue
		}
		f := LocalFile{Path: db.path, Refused: true, InUse: held}
		if held {
			out = append(out, f)
			continue
		}
		switch err := kvstore.Check(db.path, db.what); {
		case errors.Is(err, kvstore.ErrInUse):
			f.InUse = true
		case errors.Is(err, kvstore.ErrDamaged):
			f.Err = db.damaged(db.path, err)
		default:
			f.Err = err
		}
		out = append(out, f)
	}
	return out
}

func exists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() > 0
}
