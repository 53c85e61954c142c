#!/bin/sh
# layer_include.sh <lib source dir> <out dir> <folder>...
# Makes <out dir> an include directory holding only the given layer folders of lib/ (symlinks),
# so that a layer compiled with -I<out dir> cannot include the headers of any other.
set -eu
src=$1
out=$2
shift 2
rm -rf "$out"
mkdir -p "$out"
for folder in "$@"; do
  mkdir -p "$out/$(dirname "$folder")"
  ln -s "$src/$folder" "$out/$folder"
done
