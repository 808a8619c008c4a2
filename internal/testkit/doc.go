// Package testkit is the room of the test harnesses: packages that only
// tests import, kept apart from the production rooms. Each is a package of
// its own:
//
//   - chcluster: the replicated ClickHouse test cluster (2 shards x 2
//     replicas), its nodes killed and started again (make test-cluster);
//   - chserver: a throw-away ClickHouse server whose user has a password;
//   - chtest: the ClickHouse target of the test run (single server or
//     cluster) for integration tests in other packages;
//   - zktest: a ZooKeeper, shared or private (stopped and started);
//   - faultproxy: a TCP proxy whose traffic can be cut (an outage as a
//     client sees it);
//   - diskfault: a folder whose writes fail and succeed again;
//   - blobtest: a real S3-compatible server (versitygw);
//   - feedtest: a fake of the service's contact and send endpoints.
//
// No production package imports them (TestNoProductionImport). The
// emulator of the whole API is not here: it is a product of its own (sim,
// cmd/surveysim).
package testkit
