package parquet

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/surveysync/surveysync/internal/atomicfile"
)

// importJSONL imports a JSON Lines file of the former format (until issue
// 18) into db, then removes it. put is called for every complete line (a
// last line without its newline was torn by a crash: dropped) in one
// transaction, which also records the file's SHA-256 under its name in
// bucketImported. A file whose hash is recorded was imported already (a
// crash came before its removal): it is only removed.
func importJSONL(db *bolt.DB, path string, put func(tx *bolt.Tx, line []byte) error) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("import %s: %w", path, err)
	}
	sum := sha256.Sum256(data)
	name := []byte(filepath.Base(path))
	err = db.Update(func(tx *bolt.Tx) error {
		imported := tx.Bucket(bucketImported)
		if bytes.Equal(imported.Get(name), sum[:]) {
			return nil
		}
		lines := bytes.Split(data, []byte{'\n'})
		for _, line := range lines[:len(lines)-1] { // the last one is empty or torn
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			if err := put(tx, line); err != nil {
				return err
			}
		}
		return imported.Put(name, sum[:])
	})
	if err != nil {
		return fmt.Errorf("import %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove imported %s: %w", path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
