#!/usr/bin/env bash
# Download a pretrained pix2pix generator to ./checkpoints/NAME_pretrained/latest_net_G.pth, as the
# reference's scripts/download_pix2pix_model.sh does; then, e.g. for facades_label2photo:
#   python test.py --dataroot datasets/facades --name facades_label2photo_pretrained --model pix2pix --direction BtoA
# The file is checked to be a PyTorch checkpoint. IMG2IMG_DOWNLOAD_BASE overrides the server.
set -uo pipefail
source "$(dirname "$0")/download_lib.sh"

FILE=${1:-}
check_name "$FILE" models edges2shoes sat2map map2sat facades_label2photo day2night

echo "Note: available models are edges2shoes, sat2map, map2sat, facades_label2photo, and day2night"
MODEL_FILE=./checkpoints/${FILE}_pretrained/latest_net_G.pth
fetch "$DOWNLOAD_BASE/pix2pix/models-pytorch/$FILE.pth" "$MODEL_FILE"
verify_pth "$MODEL_FILE" || rejected "$MODEL_FILE"
echo "model ready: $MODEL_FILE"
