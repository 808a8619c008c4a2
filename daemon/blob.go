package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sink/blob"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

func openBlobStore(ctx context.Context, cfg *config.Config) (*blob.Store, error) {
	return blob.OpenStore(ctx, blob.StoreOptions{
		URL:          cfg.Files.URL.Value(),
		DataDir:      cfg.Parquet.Dir,
		AccessKey:    cfg.Files.S3.AccessKeyID,
		SecretKey:    cfg.Files.S3.SecretAccessKey.Value(),
		SessionToken: cfg.Files.S3.SessionToken.Value(),
	})
}

// newCopier builds the uploaded-files copier: downloads through the shared
// API client, objects into files.url, the index in the warehouse. The
// returned func closes the object store.
func newCopier(ctx context.Context, cfg *config.Config, client *surveyapi.Client, wh warehouse.Warehouse, log *slog.Logger, reg prometheus.Registerer) (*blob.Copier, func() error, error) {
	idx, err := wh.FileIndex()
	if err != nil {
		return nil, nil, err
	}
	// Downloads are spooled (hashed, size-checked) before they are stored;
	// keep the spool beside the data, not in a small /tmp.
	spoolDir := filepath.Join(cfg.Parquet.Dir, "_files_spool")
	if err := os.MkdirAll(spoolDir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("files spool: %w", err)
	}
	if n, err := blob.RemoveSpoolLeftovers(spoolDir); err != nil {
		return nil, nil, fmt.Errorf("files spool: %w", err)
	} else if n > 0 {
		log.Info("files: removed the temporary files of downloads a stopped process left; they are downloaded again", "dir", spoolDir, "files", n)
	}
	bs, err := openBlobStore(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("files.url: %w", err)
	}
	dl := blob.DownloadFunc(func(ctx context.Context, surveyID int64, responseID, fileID survey.GUID) (*blob.Download, error) {
		f, err := client.DownloadFile(ctx, surveyID, responseID, fileID)
		if err != nil {
			return nil, err
		}
		return &blob.Download{Body: f.Body, ContentType: f.ContentType, FileName: f.FileName, Size: f.Size}, nil
	})
	c := blob.NewCopier(bs, dl, idx, blob.Options{
		MaxConcurrency:     cfg.Files.MaxConcurrency,
		MaxSize:            int64(cfg.Files.MaxSize),
		DeleteWithResponse: cfg.Files.DeleteWithResponse,
		TypeMatch:          cfg.Files.TypeMatch,
		SpoolDir:           spoolDir,
		IsPermanent:        surveyapi.IsPermanent,
		Logger:             log.With("component", "files"),
		Registerer:         reg,
	})
	return c, bs.Close, nil
}

// checkBlob checks write access to the object store (doctor): it writes,
// reads back and deletes a small object under surveysync-doctor/.
func checkBlob(ctx context.Context, cfg *config.Config) error {
	bs, err := openBlobStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer bs.Close()
	return bs.Check(ctx)
}
