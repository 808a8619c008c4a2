package main

import (
	"context"
	"errors"

	"github.com/surveysync/surveysync/config"
)

// checkBlob checks write access to the object store (doctor).
func checkBlob(ctx context.Context, cfg *config.Config) error {
	return errors.New("object storage is not wired yet")
}
