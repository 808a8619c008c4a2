#!/usr/bin/env bash
# deploy-check.sh: builds what operators install and checks each piece
# (docs/deployment.md). `make deploy-check`; .ci/run runs it. Needs root for
# `dpkg -i`, and podman or buildah, systemd-analyze (package systemd) and
# dpkg-deb; .ci/run installs them. A missing tool fails the check (CI must
# not pass by skipping); DEPLOY_CHECK_ALLOW_MISSING=1 skips instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
TMP="$(mktemp -d /tmp/surveysync-deploy-check.XXXXXX)"
CTR=""
cleanup() {
	[[ -n "$CTR" ]] && $TOOL rm -f "$CTR" >/dev/null 2>&1 || true
	if dpkg -s surveysync >/dev/null 2>&1 && [[ -f "$TMP/installed-by-us" ]]; then dpkg --purge surveysync >/dev/null || true; fi
	rm -rf "$TMP"
}
trap cleanup EXIT

log() { printf '\n--> %s [%s]\n' "$*" "$(date -u +%H:%M:%S)"; }
fail() { echo "deploy-check: FAIL: $*" >&2; exit 1; }
need() {
	command -v "$1" >/dev/null 2>&1 && return 0
	if [[ "${DEPLOY_CHECK_ALLOW_MISSING:-}" == 1 ]]; then
		echo "deploy-check: $1 not installed: $2 skipped"
		return 1
	fi
	fail "$1 not installed (needed for $2)"
}

BIN=bin/release/surveysync

check_release() {
	log "release binary: static, stamped, reproducible"
	local before after
	make --no-print-directory release
	go version -m "$BIN" >"$TMP/buildinfo"
	grep -q 'CGO_ENABLED=0' "$TMP/buildinfo" || fail "$BIN is not built with CGO_ENABLED=0"
	grep -q -- '-trimpath=true' "$TMP/buildinfo" || fail "$BIN is not built with -trimpath"
	"$BIN" version | tee "$TMP/version"
	grep -q "commit $(git rev-parse HEAD)" "$TMP/version" || fail "version does not name the commit"
	echo "size: $(stat -c %s "$BIN") bytes"
	before=$(sha256sum <"$BIN")
	# the same source, built again elsewhere with a cold link: the same bytes
	make --no-print-directory release RELEASE_DIR="$TMP/again" >/dev/null
	after=$(sha256sum <"$TMP/again/surveysync")
	[[ "$before" == "$after" ]] || fail "two release builds differ: $before / $after"
	echo "reproducible: sha256 ${before%% *} twice"
}

# demo_run BINARY: `run --exit-when-synced` on the built-in emulator into
# Parquet files, as the image's variables set it.
demo_run() {
	local bin=$1 dir="$TMP/demo-$RANDOM"
	mkdir -p "$dir"
	(cd "$dir" && SURVEYSYNC_PARQUET__DIR="$dir" SURVEYSYNC_WEBHOOKS__SPOOL_DIR="$dir/webhook-spool" \
		SURVEYSYNC_METRICS__LISTEN=127.0.0.1:0 SURVEYSYNC_DEMO__EMULATOR__RESPONSES_PER_SURVEY=50 \
		timeout 120 "$bin" run --exit-when-synced) >"$dir/out" 2>&1 || { tail -20 "$dir/out"; fail "demo run of $bin"; }
	grep -q "every survey is caught up" "$dir/out" || { tail -20 "$dir/out"; fail "demo run did not catch up"; }
	ls "$dir"/answers/*/*/*.parquet >/dev/null 2>&1 || fail "demo run wrote no Parquet files"
	grep "caught up" "$dir/out"
}

TOOL=""
check_image() {
	log "container image"
	if command -v podman >/dev/null 2>&1; then TOOL=podman
	elif need buildah "the container image"; then TOOL=buildah
	else return 0; fi
	make --no-print-directory image IMAGE_TOOL=$TOOL IMAGE=localhost/surveysync-check
	local img=localhost/surveysync-check:latest
	local got want
	got=$($TOOL inspect --type image --format '{{.Config.User}}|{{json .Config.ExposedPorts}}|{{json .Config.Volumes}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{json .Config.Healthcheck.Test}}' "$img")
	want='65532:65532|{"8088/tcp":{},"9464/tcp":{}}|{"/data":{}}|["/usr/bin/surveysync"]|["run"]|["CMD","/usr/bin/surveysync","healthcheck"]'
	[[ "$got" == "$want" ]] || fail "image config: got $got, want $want"
	echo "config: $got"
	[[ $($TOOL inspect --type image --format '{{json .Config.Env}}' "$img") == *SURVEYSYNC_METRICS__LISTEN=0.0.0.0:9464* ]] || fail "image env"
	echo "size: $($TOOL inspect --type image --format '{{.Size}}' "$img") bytes, $($TOOL inspect --type image --format '{{len .RootFS.Layers}}' "$img") layers"
	# the files, copied out of the image without running it
	local out="$TMP/image"
	mkdir -p "$out"
	if [[ $TOOL == podman ]]; then
		CTR=$(podman create "$img")
		for f in /usr/bin/surveysync /etc/passwd /etc/ssl/certs/ca-certificates.crt; do podman cp "$CTR:$f" "$out/"; done
	else
		CTR=$(buildah from "$img")
		local mnt
		mnt=$(buildah mount "$CTR")
		cp "$mnt/usr/bin/surveysync" "$mnt/etc/passwd" "$mnt/etc/ssl/certs/ca-certificates.crt" "$out/"
		buildah umount "$CTR" >/dev/null
	fi
	cmp "$out/surveysync" "$BIN" || fail "the image's binary is not the release binary"
	grep -q '^surveysync:x:65532:65532:' "$out/passwd" || fail "no user 65532 in the image's /etc/passwd"
	grep -q 'BEGIN CERTIFICATE' "$out/ca-certificates.crt" || fail "no CA bundle in the image"
	"$out/surveysync" version
	demo_run "$out/surveysync"
	# Running the container itself needs cgroups and rlimits some sandboxes refuse.
	if [[ $TOOL == podman ]]; then
		local msg
		if msg=$(timeout 60 podman run --rm --no-healthcheck "$img" version 2>&1); then
			echo "podman run: $msg"
			timeout 180 podman run --rm --no-healthcheck -e SURVEYSYNC_DEMO__EMULATOR__RESPONSES_PER_SURVEY=50 "$img" run --exit-when-synced | grep "caught up" ||
				fail "the container's demo run"
		else
			echo "podman run cannot start a container here (checked the extracted binary instead): ${msg##*$'\n'}"
		fi
	fi
}

check_deb() {
	log ".deb: build, install, run, verify the unit, purge"
	need dpkg-deb ".deb" || return 0
	make --no-print-directory deb | tail -1 >"$TMP/deb"
	local deb
	deb=$(cat "$TMP/deb")
	dpkg-deb --info "$deb"
	dpkg-deb --contents "$deb" >"$TMP/contents"
	awk '{print $1, $2, $6}' "$TMP/contents"
	for f in ./usr/bin/surveysync ./lib/systemd/system/surveysync.service ./etc/surveysync/surveysync.yaml ./etc/surveysync/surveysync.env; do
		grep -q " $f\$" "$TMP/contents" || fail "$f not in $deb"
	done
	echo "size: $(stat -c %s "$deb") bytes"
	if dpkg -s surveysync >/dev/null 2>&1; then
		fail "surveysync is already installed on this machine; not touching it"
	fi
	dpkg -i "$deb"
	touch "$TMP/installed-by-us"
	/usr/bin/surveysync version
	getent passwd surveysync >/dev/null || fail "postinst created no user surveysync"
	[[ $(stat -c '%U %a' /var/lib/surveysync) == "surveysync 750" ]] || fail "/var/lib/surveysync: $(stat -c '%U %a' /var/lib/surveysync)"
	[[ $(stat -c '%a' /etc/surveysync/surveysync.env) == 600 ]] || fail "surveysync.env is not 0600"
	# doctor as the service user, from the installed paths, on the
	# emulator with Parquet files (the example's ClickHouse is not ours)
	(cd /var/lib/surveysync && runuser -u surveysync -- /usr/bin/surveysync doctor --config /etc/surveysync/surveysync.yaml \
		--demo --surveys "" --clickhouse-addr "" --metrics-listen 127.0.0.1:0) || fail "doctor from the installed paths"
	if need systemd-analyze "systemd-analyze verify"; then
		cmp /lib/systemd/system/surveysync.service deploy/systemd/surveysync.service
		systemd-analyze verify /lib/systemd/system/surveysync.service || fail "systemd-analyze verify"
		echo "systemd-analyze verify: ok"
		systemd-analyze security --offline=true /lib/systemd/system/surveysync.service | tail -1
	fi
	dpkg --purge surveysync
	rm -f "$TMP/installed-by-us"
	for f in /usr/bin/surveysync /lib/systemd/system/surveysync.service /etc/surveysync; do
		[[ ! -e $f ]] || fail "$f left after purge"
	done
	echo "purged cleanly (the user and /var/lib/surveysync stay, as documented)"
}

check_kubernetes() {
	log "Kubernetes manifests (deploy/kubernetes/check)"
	# -mod=mod: the check module links config (to match the probes with its
	# defaults) through a replace of the main module, so a dependency the
	# main module gains would otherwise fail here on a stale go.sum; the
	# committed go.mod/go.sum stay tidy (make deploy-check-tidy).
	(cd deploy/kubernetes/check && go test -mod=mod -count=1 ./...)
}

start=$(date +%s)
check_release
check_image
check_deb
check_kubernetes
log "deploy-check passed in $(($(date +%s) - start)) s"
