#!/usr/bin/env bash
# tests/bench/images_unpack.sh — unpacks the default image (images/recipes/python) with lensbox-image and with
# `umoci unpack`, from the same OCI layout, several times each in one run, and prints both medians and the ratio.
# A benchmark, not a test: it asserts nothing but prints figures. Run as root after building lensbox-image:
#   tests/bench/images_unpack.sh [BUILD_DIR] [RUNS]
# Both tools start from a cold store each run (a fresh directory; the page cache is warm for both alike).
# lensbox-image's figure includes what umoci does not do: verifying the blob digest and diff_id, and syncfs before
# publishing the tree.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
runs=${2:-5}
tool=$build/images/lensbox-image
[[ -x $tool ]] || { echo "images_unpack: $tool is not built" >&2; exit 1; }
command -v umoci >/dev/null || { echo "images_unpack: umoci is not installed (scripts/install-deps)" >&2; exit 1; }

archive=$("$src/images/recipes/python")
work=$(mktemp -d /var/tmp/lensbox-bench-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/layout"
tar -xf "$archive" -C "$work/layout"
ref=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$work/layout/index.json")

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ours=() theirs=()
for ((i = 0; i < runs; i++)); do
	rm -rf "$work/store" "$work/bundle"
	t0=$(now)
	"$tool" --root "$work/store" import "$work/layout" >/dev/null
	t1=$(now)
	umoci unpack --image "$work/layout:$ref" "$work/bundle" >/dev/null
	t2=$(now)
	ours+=($(((t1 - t0) / 1000000)))
	theirs+=($(((t2 - t1) / 1000000)))
	sync
done
m_ours=$(printf '%s\n' "${ours[@]}" | median)
m_theirs=$(printf '%s\n' "${theirs[@]}" | median)
entries=$(jq '.entries' "$work/store"/images/*/image.json)
bytes=$(jq '.size_bytes' "$work/store"/images/*/image.json)
echo "image: $archive ($entries entries, $((bytes / 1000000)) MB unpacked), $runs runs each"
echo "lensbox-image import: median ${m_ours} ms   (runs: ${ours[*]})"
echo "umoci unpack:         median ${m_theirs} ms   (runs: ${theirs[*]})"
awk -v a="$m_ours" -v b="$m_theirs" 'BEGIN { printf "ratio lensbox/umoci: %.2f (below 1 = lensbox faster)\n", a / b }'
