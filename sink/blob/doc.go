// Package blob copies the files respondents uploaded (docs/api.md §4.5) into object
// storage, once, verified, and indexes each one.
//
// Where: a Store opened from a URL — file:///abs/dir (the default: the data
// folder's "files" subfolder) or s3://bucket?endpoint=…&region=…&use_path_style=true
// for AWS S3 and compatible servers (MinIO, Ceph, R2, Versity), with static
// credentials from the options or the AWS default chain. Nothing else: other
// stores are reached through an S3-compatible endpoint or gateway. Keys are
// surveys/{survey_id}/responses/{response_id}/{file_id}.
//
// What: the object's bytes, its content type, a Content-Disposition carrying
// the original name (RFC 6266, UTF-8 in filename*), and metadata sha256,
// size, filename (UTF-8; percent-encoded on S3 so headers stay ASCII),
// survey-id, response-id, question-id and file-id.
//
// How (Copier):
//   - A file already stored — an object whose metadata carries a SHA-256 and
//     a size equal to the object's — is skipped without downloading it
//     (Options.VerifyExisting adds a size check against the API).
//   - Otherwise the download is streamed through a SHA-256 hasher and a
//     byte counter into a spool (memory up to Options.MemSpool, then a
//     temporary file), checked against Content-Length and the size cap, and
//     only then written to the store in one upload with its metadata. A cut
//     download therefore never reaches the store. To S3 (up to 5 GiB) the
//     upload is one streamed PutObject, which creates the object only when
//     it completes; bigger files go as a multipart upload from sections of
//     the spool file, aborted on error; file:// renames a complete
//     temporary file into place. Memory per copy is bounded whatever the
//     file size.
//   - At most Options.MaxConcurrency copies run at once. A failed copy is
//     retried with exponential backoff (internal/backoff, from the attempt
//     count the index keeps); every attempt's outcome is a row in
//     the index (files.Index: uploaded_files in ClickHouse, or a JSONL
//     file), so files that keep failing are visible with their error and
//     are reloaded from the index on later passes and after a restart.
//     Queueing never blocks the caller: when the queue is full, the file is
//     written to the index as pending instead.
//   - A deleted response's files are marked deleted in the index, and
//     removed from the store when Options.DeleteWithResponse is on.
//
// Files: store.go (the Store and its backend interface), store_file.go and
// store_s3.go (the two backends), copier.go (options, types, NewCopier),
// copy.go (one copy: skip check, download, spool, put), spool.go,
// schedule.go and queue.go (the queue, Run's workers and its loop of index
// reloads and discovery), attempts.go (an attempt's outcome, permanence and
// the back-off), index.go (buffered index rows), delete.go (deleted
// responses), metrics.go.
//
// docs/files.md is the user-facing description.
package blob
