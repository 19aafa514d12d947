#!/usr/bin/env bash
# Download a CycleGAN dataset to ./datasets/NAME/ (trainA, trainB, testA, testB), as the
# reference's datasets/download_cyclegan_dataset.sh does; run it from the repository root.
#   bash scripts/download_cyclegan_dataset.sh horse2zebra
# The archive is checked (zip CRCs, a single NAME/ folder) before it is unpacked.
# IMG2IMG_DOWNLOAD_BASE overrides the server (see scripts/download_lib.sh, docs/datasets.md).
set -uo pipefail
source "$(dirname "$0")/download_lib.sh"

FILE=${1:-}
check_name "$FILE" datasets apple2orange summer2winter_yosemite horse2zebra monet2photo cezanne2photo \
  ukiyoe2photo vangogh2photo maps cityscapes facades iphone2dslr_flower mini mini_pix2pix mini_colorization ae_photos

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
ZIP_FILE=./datasets/$FILE.zip
fetch "$DOWNLOAD_BASE/cyclegan/datasets/$FILE.zip" "$ZIP_FILE"
verify_zip "$ZIP_FILE" "$FILE" || rejected "$ZIP_FILE"
unpack_zip "$ZIP_FILE" ./datasets/ || die "could not unpack $ZIP_FILE into ./datasets/ (disk full?)."
rm -f "$ZIP_FILE"
echo "dataset ready: $TARGET_DIR"
