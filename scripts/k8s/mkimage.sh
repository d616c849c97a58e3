#!/usr/bin/env bash
# Packs a root filesystem directory into a one-layer docker-archive tarball
# (what `docker save` writes and `ctr images import` reads), with tar and
# sha256sum only: no registry, no Docker.
#   mkimage.sh REF ROOTFS OUT.tar CMD_JSON      e.g. '["/pause"]'
set -euo pipefail
ref=$1 root=$2 out=$3 cmd=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$root" -cf "$work/layer.tar" .
diff=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
mkdir "$work/$diff"
mv "$work/layer.tar" "$work/$diff/layer.tar"
printf '{"architecture":"%s","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin:/sbin"],"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$(go env GOARCH 2>/dev/null || echo amd64)" "$cmd" "$diff" >"$work/config.json"
cfg=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/$cfg.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$ref" "$diff" >"$work/manifest.json"
tar -C "$work" -cf "$out" manifest.json "$cfg.json" "$diff"
