# Release build and packages, included by the Makefile (docs/deployment.md).
#
#   make release        bin/release/surveysync: static (CGO off), -trimpath, stripped,
#                       version/commit/date stamped; the same commit gives the same bytes
#   make image          the container image surveysync:$(VERSION) (podman or buildah;
#                       pulls nothing: FROM scratch, the binary and files staged in bin/image)
#   make deb            bin/surveysync_<version>_$(DEB_ARCH).deb (dpkg-deb)
#   make deploy-check   builds all three and checks them (scripts/deploy-check.sh; CI runs it)

RELEASE_DIR ?= $(BIN)/release
# A tag (v1.2.3) when HEAD has one, else the commit; -dirty with local changes.
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The commit's date, not now: reproducible. SOURCE_DATE_EPOCH wins when set.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE  ?= $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
GOARCH      ?= $(shell $(GO) env GOARCH)
RELEASE_LDFLAGS = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(BUILD_DATE)
IMAGE       ?= surveysync
IMAGE_TOOL  ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo buildah)
DEB_ARCH    ?= $(GOARCH)

export SOURCE_DATE_EPOCH

.PHONY: release image deb deploy-check

release: ## static, stripped, reproducible bin/release/surveysync (CGO off, -trimpath)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH) $(GO) build -trimpath -buildvcs=false \
		-ldflags '$(RELEASE_LDFLAGS)' -o $(RELEASE_DIR)/surveysync ./cmd/surveysync

image: release ## container image $(IMAGE):$(VERSION) from scratch with podman/buildah; pulls nothing
	scripts/stage-image.sh $(RELEASE_DIR)/surveysync $(BIN)/image
	$(IMAGE_TOOL) $(if $(filter buildah,$(IMAGE_TOOL)),bud,build) --format docker --pull=never \
		--timestamp $(SOURCE_DATE_EPOCH) -f Containerfile \
		-t $(IMAGE):$(VERSION) -t $(IMAGE):latest $(BIN)/image

deb: release ## Debian package bin/surveysync_<version>_<arch>.deb (dpkg-deb)
	scripts/build-deb.sh $(RELEASE_DIR)/surveysync $(VERSION) $(DEB_ARCH) $(BIN)

deploy-check: ## build the release binary, image and .deb, and check them with the unit and manifests
	scripts/deploy-check.sh
