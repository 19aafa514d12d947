#!/usr/bin/env bash
# Download a pix2pix dataset to ./datasets/NAME/ (train, val, test of aligned A|B images), as the
# reference's datasets/download_pix2pix_dataset.sh does; run it from the repository root.
#   bash scripts/download_pix2pix_dataset.sh facades
# The archive is checked (gzip CRC, a single NAME/ folder) before it is unpacked.
# IMG2IMG_DOWNLOAD_BASE overrides the server (see scripts/download_lib.sh, docs/datasets.md).
set -uo pipefail
source "$(dirname "$0")/download_lib.sh"

FILE=${1:-}
check_name "$FILE" datasets cityscapes night2day edges2handbags edges2shoes facades maps

if [ "$FILE" = "cityscapes" ]; then
  echo "Due to license issue, we cannot provide the Cityscapes dataset from our repository. Please download the" \
       "Cityscapes dataset from https://cityscapes-dataset.com, and use the script" \
       "./datasets/prepare_cityscapes_dataset.py of the reference implementation to prepare it." >&2
  exit 1
fi

TARGET_DIR=./datasets/$FILE
if [ -d "$TARGET_DIR" ] && [ -n "$(ls -A "$TARGET_DIR")" ]; then
  echo "$TARGET_DIR already exists; delete it to download again."
  exit 0
fi
TAR_FILE=./datasets/$FILE.tar.gz
fetch "$DOWNLOAD_BASE/pix2pix/datasets/$FILE.tar.gz" "$TAR_FILE"
verify_tar "$TAR_FILE" "$FILE" || rejected "$TAR_FILE"
tar -xzf "$TAR_FILE" -C ./datasets/ || die "could not unpack $TAR_FILE into ./datasets/ (disk full?)."
rm -f "$TAR_FILE"
echo "dataset ready: $TARGET_DIR"
