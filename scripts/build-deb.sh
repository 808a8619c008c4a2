#!/usr/bin/env bash
# build-deb.sh BINARY VERSION ARCH OUTDIR: the surveysync .deb with dpkg-deb
# (in every Debian, nothing to download or compile): the binary, the
# systemd unit, the example configuration and secrets file as conffiles in
# /etc/surveysync, the docs, and maintainer scripts creating the user.
# Reproducible: fixed mtimes (SOURCE_DATE_EPOCH), root-owned entries.
set -euo pipefail
bin=${1:?usage: build-deb.sh BINARY VERSION ARCH OUTDIR}
version=${2:?} arch=${3:?} out=${4:?}
# Debian versions start with a digit: v1.2.3 → 1.2.3, v1.2.3-4-gabc → 1.2.3~4~gabc
# (before 1.2.3's successors), a bare commit abc123 → 0~gitabc123.
if [[ $version =~ ^v[0-9] ]]; then version=${version#v}; else version="0~git$version"; fi
version=${version//-/\~}
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pkg="$stage/pkg"

install -D -m 0755 "$bin" "$pkg/usr/bin/surveysync"
install -D -m 0644 "$root/deploy/systemd/surveysync.service" "$pkg/lib/systemd/system/surveysync.service"
install -D -m 0640 "$root/examples/surveysync.yaml" "$pkg/etc/surveysync/surveysync.yaml"
install -D -m 0600 "$root/deploy/systemd/surveysync.env" "$pkg/etc/surveysync/surveysync.env"
doc="$pkg/usr/share/doc/surveysync"
install -D -m 0644 "$root/docs/deployment.md" "$doc/deployment.md"
for f in configuration.md operations.md metrics.md schema.md; do
	install -m 0644 "$root/docs/$f" "$doc/$f"
done
install -D -m 0644 "$root/examples/surveysync.yaml" "$doc/examples/surveysync.yaml"
install -m 0644 "$root/examples/feeds.yaml" "$doc/examples/feeds.yaml"
install -D -m 0644 "$root/dashboards/alerts.yaml" "$doc/dashboards/alerts.yaml"

mkdir -p "$pkg/DEBIAN"
for s in postinst prerm postrm; do
	install -m 0755 "$root/deploy/deb/$s" "$pkg/DEBIAN/$s"
done
printf '/etc/surveysync/surveysync.yaml\n/etc/surveysync/surveysync.env\n' >"$pkg/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: surveysync
Version: $version
Architecture: $arch
Maintainer: surveysync <dev@surveysync.invalid>
Installed-Size: $size
Depends: adduser, ca-certificates
Section: database
Priority: optional
Homepage: https://github.com/surveysync/surveysync
Description: keeps a ClickHouse warehouse in sync with the Click4Survey service
 surveysync backfills and then continuously syncs survey responses (polling
 and webhooks) into ClickHouse or Parquet files, copies uploaded files to
 object storage and pushes contacts back. Runs as the systemd service
 surveysync under its own user; configuration in /etc/surveysync.
CONTROL
find "$pkg" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +
mkdir -p "$out"
deb="$out/surveysync_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"
