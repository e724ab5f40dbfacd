#!/usr/bin/env bash
# Puts the dashboard screenshots tests/it_dashboard.sh takes for the README
# (BUILD/screenshots/readme-run.png and readme-slices.png) into docs/img/ as small PNGs:
# pngquant reduces each to a palette of at most 256 colours (a page of text on flat colours
# keeps its look; --quality 60-90 refuses a result below 60), then optipng recompresses it
# without loss. Usage: scripts/readme-shots.sh [BUILD]   (tools: scripts/deps.sh docs)
set -euo pipefail
cd "$(dirname "$0")/.."
shots=${1:-build}/screenshots
for t in pngquant optipng; do
  command -v $t >/dev/null || { echo "readme-shots: $t missing (scripts/deps.sh docs)" >&2; exit 69; }
done
for name in run slices; do
  src=$shots/readme-$name.png dst=docs/img/dashboard-$name.png
  [[ -f $src ]] || { echo "readme-shots: no $src (run tests/it_dashboard.sh first)" >&2; exit 66; }
  pngquant --quality=60-90 --speed 1 --strip --force --output "$dst.tmp" "$src"
  optipng -quiet -o5 -strip all "$dst.tmp"
  mv "$dst.tmp" "$dst"
  echo "readme-shots: $dst $(stat -c %s "$src") -> $(stat -c %s "$dst") bytes"
done
