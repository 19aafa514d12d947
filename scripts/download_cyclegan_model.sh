#!/usr/bin/env bash
# Download a pretrained CycleGAN generator to ./checkpoints/NAME_pretrained/latest_net_G.pth, as the
# reference's scripts/download_cyclegan_model.sh does; then, e.g. for horse2zebra:
#   python test.py --dataroot datasets/horse2zebra/testA --name horse2zebra_pretrained --model test --no_dropout
# The file is checked to be a PyTorch checkpoint. IMG2IMG_DOWNLOAD_BASE overrides the server.
set -uo pipefail
source "$(dirname "$0")/download_lib.sh"

FILE=${1:-}
check_name "$FILE" models apple2orange orange2apple summer2winter_yosemite winter2summer_yosemite horse2zebra \
  zebra2horse monet2photo style_monet style_cezanne style_ukiyoe style_vangogh sat2map map2sat \
  cityscapes_photo2label cityscapes_label2photo facades_photo2label facades_label2photo iphone2dslr_flower

echo "Note: available models are apple2orange, orange2apple, summer2winter_yosemite, winter2summer_yosemite," \
     "horse2zebra, zebra2horse, monet2photo, style_monet, style_cezanne, style_ukiyoe, style_vangogh, sat2map," \
     "map2sat, cityscapes_photo2label, cityscapes_label2photo, facades_photo2label, facades_label2photo," \
     "iphone2dslr_flower"
MODEL_FILE=./checkpoints/${FILE}_pretrained/latest_net_G.pth
fetch "$DOWNLOAD_BASE/cyclegan/pretrained_models/$FILE.pth" "$MODEL_FILE"
verify_pth "$MODEL_FILE" || rejected "$MODEL_FILE"
echo "model ready: $MODEL_FILE"
