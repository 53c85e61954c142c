#!/bin/sh
# layer_include.sh <lib source dir> <out dir> <folder>...
# Makes <out dir> an include directory holding only the given layer folders of lib/ (symlinks),
# so that a layer compiled with -I<out dir> cannot include the headers of any other. A folder
# that holds other layers' folders (transport/: the queue-pair interface, beside transport/tcp
# and the other transports) gives only its own files.
set -eu
src=$1
out=$2
shift 2
rm -rf "$out"
mkdir -p "$out"
for folder in "$@"; do
  if [ -n "$(find "$src/$folder" -mindepth 1 -maxdepth 1 -type d)" ]; then
    mkdir -p "$out/$folder"
    for file in "$src/$folder"/*; do
      [ -d "$file" ] || ln -s "$file" "$out/$folder/"
    done
  else
    mkdir -p "$out/$(dirname "$folder")"
    ln -s "$src/$folder" "$out/$folder"
  fi
done
