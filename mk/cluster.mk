# Test cluster targets, included by the Makefile.
#
#   make cluster-up     start ZooKeeper (127.0.0.1:2181) and a 2 shards x 2 replicas ClickHouse 18.16
#                       cluster `surveysync_cluster` (native ports 9101-9104) under $(CLUSTER_DIR);
#                       prints the export lines for the tests
#   make cluster-down   stop it (files kept; CLUSTER_PURGE=1 deletes them)
#
# One node: scripts/cluster-node.sh $(CLUSTER_DIR) stop|kill|start N. See docs/operations.md,
# "A test cluster on one machine".

CLUSTER_DIR ?= /tmp/surveysync-cluster
CLUSTER_PURGE ?=

.PHONY: cluster-up cluster-down

cluster-up: ## start a test cluster (ZooKeeper + 2 shards x 2 replicas, ClickHouse 18.16) on 127.0.0.1:9101-9104 under $(CLUSTER_DIR)
	@scripts/cluster-up.sh $(CLUSTER_DIR)

cluster-down: ## stop it (CLUSTER_PURGE=1 also deletes its files)
	@scripts/cluster-down.sh $(CLUSTER_DIR) $(if $(CLUSTER_PURGE),--purge)
