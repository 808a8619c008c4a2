# ClickHouse dev/test server targets, included by the Makefile.
#
#   make clickhouse-up     start Debian's clickhouse-server on 127.0.0.1:9000 (native) / 8123 (HTTP),
#                          all files under $(CLICKHOUSE_DIR); prints the export line for the tests
#   make clickhouse-down   stop it (files kept; CLICKHOUSE_PURGE=1 deletes them)
#
# Then: export SURVEYSYNC_TEST_CLICKHOUSE_ADDR=127.0.0.1:9000

CLICKHOUSE_DIR ?= /tmp/surveysync-clickhouse
CLICKHOUSE_TCP_PORT ?= 9000
CLICKHOUSE_HTTP_PORT ?= 8123
CLICKHOUSE_PURGE ?=

.PHONY: clickhouse-up clickhouse-down

clickhouse-up: ## start a dev ClickHouse (18.16, Debian) on 127.0.0.1:9000 under $(CLICKHOUSE_DIR)
	@CLICKHOUSE_TCP_PORT=$(CLICKHOUSE_TCP_PORT) CLICKHOUSE_HTTP_PORT=$(CLICKHOUSE_HTTP_PORT) \
		scripts/clickhouse-up.sh $(CLICKHOUSE_DIR)

clickhouse-down: ## stop it (CLICKHOUSE_PURGE=1 also deletes its files)
	@scripts/clickhouse-down.sh $(CLICKHOUSE_DIR) $(if $(CLICKHOUSE_PURGE),--purge)
