#!/usr/bin/env bash
# stage-image.sh BINARY DIR: lays out the build context of the Containerfile
# in DIR (emptied first): the binary, /etc/passwd and /etc/group naming the
# image's user (65532, "surveysync"), the host's CA bundle, and /data.
set -euo pipefail
bin=${1:?usage: stage-image.sh BINARY DIR}
dir=${2:?usage: stage-image.sh BINARY DIR}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[[ -f "$ca" ]] || { echo "stage-image.sh: no CA bundle at $ca (apt-get install ca-certificates, or set CA_BUNDLE)" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/etc/ssl/certs" "$dir/data"
install -m 0755 "$bin" "$dir/surveysync"
install -m 0644 "$ca" "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nsurveysync:x:65532:65532:surveysync:/data:/sbin/nologin\n' >"$dir/etc/passwd"
printf 'root:x:0:\nsurveysync:x:65532:\n' >"$dir/etc/group"
chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
# the same bytes give the same layers: fixed modification times
find "$dir" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +
