// Package chdbcheck proves that the warehouse schema of sink/clickhouse (its
// embedded migrations and the *_current views) runs, with the same
// semantics, on a current ClickHouse: it loads libchdb.so (ClickHouse 26.x
// as a library, through github.com/chdb-io/chdb-go) and replays the view
// scenarios of the 18.16 integration tests.
//
// chdb-go loads the library when the process starts and panics when it is
// missing, so the test only builds with the tag "chdb":
//
//	cd /tmp && npm pack @chdb/lib-linux-x64-gnu@26.7.3-stable.1 && tar xzf chdb-lib-linux-x64-gnu-*.tgz
//	CHDB_LIB_PATH=/tmp/package/libchdb.so go test -tags chdb -count=1 ./sink/clickhouse/chdbcheck/
//
// .ci/run does this when the download fits its time budget. One chdb
// session per process: the tests run serially (no t.Parallel).
package chdbcheck
