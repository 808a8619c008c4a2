package clickhouse

import (
	"errors"
	"io"
	"net"
	"syscall"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// wrongPortError is Open's error when clickhouse.addr is ClickHouse's HTTP
// interface: a mistake in the configuration, not an outage.
type wrongPortError struct {
	hint string
	err  error
}

func (e *wrongPortError) Error() string {
	return "clickhouse: " + e.hint + " (ping: " + e.err.Error() + ")"
}
func (e *wrongPortError) Unwrap() error { return e.err }

// Unreachable reports whether an error of Open (or Ping) means the server
// could not be reached or is briefly unable to answer — a network error, a
// refused or reset connection, a timeout, a transient server condition
// (ZooKeeper away, a distributed DDL not finished on every node: a
// *ClusterDDLError; the migrations lock held by another daemon: a
// *MigrationsBusyError) — so that
// trying again later may succeed: the daemon waits such a start out
// (docs/operations.md, "Start-up"). A refusal (wrong password, no grant),
// an invalid option or ClickHouse's HTTP port given as clickhouse.addr is
// not: waiting cannot fix the configuration.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var wp *wrongPortError
	if errors.As(err, &wp) {
		return false
	}
	var (
		cde  *ClusterDDLError
		busy *MigrationsBusyError
	)
	if errors.As(err, &cde) || errors.As(err, &busy) {
		return true
	}
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return transientException(ex.Code)
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
