#!/usr/bin/env bash
# The demo: set up, make the built-in dataset, train pix2pix on it, test, and report.
# About 5-10 minutes on a 2-core CPU (most of the first run is installing PyTorch).
# `bash scripts/demo.sh cyclegan` trains CycleGAN on the unpaired demo (label maps and scenes, unpaired) instead;
# `bash scripts/demo.sh cut` trains CUT on it, `bash scripts/demo.sh sb` UNSB (docs/cut.md, docs/sb.md);
# `bash scripts/demo.sh bicyclegan` trains BicycleGAN where one input has many right answers (docs/bicyclegan.md);
# `bash scripts/demo.sh volumes` trains pix2pix on 3-D MR -> CT phantoms (docs/volumes.md).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bash scripts/demo.sh [pix2pix|cyclegan|cut|sb|bicyclegan|volumes] [--seed N]"
# `bash scripts/demo.sh TASK --seed N`: another seed (runs named with _seedN beside the seed-0 ones).
# The arguments are checked before anything is installed.
task=pix2pix
if [ $# -ge 1 ] && [ "$1" != "--seed" ]; then task=$1; shift; fi
case "$task" in
  pix2pix|cyclegan|cut|sb|bicyclegan|volumes) ;;
  *) echo "error: demo.sh: unknown demo '$task'. $usage (pix2pix is the default)" >&2; exit 2 ;;
esac
seed=0
max_seed=4294967295  # train.py's --seed takes 0 to 2**32 - 1 (util/flag_types.py, MAX_SEED)
if [ $# -ge 1 ]; then
  if [ "$1" != "--seed" ] || [ $# -ne 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
    echo "error: demo.sh: after the demo's name only '--seed N' (N a whole number) is understood, got: $*. $usage" >&2
    exit 2
  fi
  seed=${2#"${2%%[!0]*}"}  # without leading zeros (bash would read 010 as octal)
  seed=${seed:-0}
  # at most 10 digits before comparing: bash's integers have 64 bits
  if [ ${#seed} -gt 10 ] || [ "$seed" -gt $max_seed ]; then
    echo "error: demo.sh: --seed $2 is out of train.py's range 0 to $max_seed; pass --seed N with N in that" \
      "range, e.g. --seed 1. $usage" >&2
    exit 2
  fi
fi
suffix=$([ "$seed" = 0 ] || echo "_seed$seed")
bash scripts/setup.sh
PY=.venv/bin/python
case "$task" in
  pix2pix) $PY scripts/make_demo_dataset.py --out datasets --size 128 --task pix2pix ;;
  bicyclegan|volumes) $PY scripts/make_demo_dataset.py --out datasets --size 128 --task "$task" ;;
  # unpaired (cyclegan, cut, sb): label maps and renders of other scenes, 64 px; held-out scenes in pairs
  cyclegan|cut|sb) $PY scripts/make_demo_dataset.py --out datasets --size 64 --task scenes ;;
esac

if [ "$task" = "volumes" ]; then
  # 3-D: MR-like phantoms -> their CT in Hounsfield units (bone is dark in MR like air, bright in CT: only
  # its place tells them apart). pix2pix with a 3-D U-Net trained on 32^3 patches, applied to whole
  # held-out volumes in blended sliding windows; NIfTI outputs over their inputs in results/.../volumes/.
  # About 5 minutes on 2 cores (docs/volumes.md).
  flags=(--dataroot datasets/demo_volumes --name demo_volumes$suffix --model pix2pix --dataset_mode aligned_volume
         --input_nc 1 --output_nc 1 --data_range 0 1200 -1000 1500 --netG unet_32_3d --ngf 16 --patch_size 32
         --seed "$seed")
  $PY train.py "${flags[@]}" --netD n_layers_3d --n_layers_D 2 --ndf 16 --patches_per_volume 8 --batch_size 2 \
    --foreground_fraction 0.5 --n_epochs 10 --n_epochs_decay 10 --display_id 0 --print_freq 1000 --val_freq 5 \
    --save_best MAE
  $PY test.py "${flags[@]}" --eval
  $PY scripts/demo_report.py "${flags[@]}" --eval --num_test 2
  echo "results page: $(pwd)/results/demo_volumes$suffix/test_latest/index.html"
  exit 0
fi

if [ "$task" = "bicyclegan" ]; then
  # Label maps -> scenes whose colours are turned by a random hue: many renderings are right. BicycleGAN
  # learns to give several (its samples, one per latent code); pix2pix, trained on the same data with
  # dropout (the reference's only source of variety), gives one. Both are scored on held-out images:
  # fidelity (L1/PSNR of BicycleGAN's encoded output, pix2pix's output) against the untrained model,
  # and diversity (mean pairwise distance of 5 answers per input).
  # 128 px (BicycleGAN's 128 px networks), 16 filters wide, 30 epochs each: about 10 minutes on 2 cores.
  # BicycleGAN with --norm none: the code reaches G as constant planes, and the instance norm of its default
  # takes each channel's mean away after a convolution, so the code (and a whole-image hue) got through little
  # more than the first level's skip, and some seeds ignored it (docs/bicyclegan.md, "Why the demo trains
  # BicycleGAN with `--norm none`").
  common=(--dataroot datasets/demo_bicyclegan --load_size 128 --crop_size 128 --netG unet_128 --ngf 16 --ndf 16
          --seed "$seed")
  bicycle=("${common[@]}" --name demo_bicyclegan$suffix --model bicycle_gan --netE resnet_128 --nef 16
           --netD basic_128_multi --netD2 basic_128_multi --norm none)
  $PY train.py "${bicycle[@]}" --n_epochs 15 --n_epochs_decay 15 --display_id 0 --print_freq 1000 --batch_size 2
  $PY test.py "${bicycle[@]}" --num_test 10 --n_samples 5
  echo "BicycleGAN (checkpoints/demo_bicyclegan$suffix):"
  # The demo's exit status: 1 if either model did not beat its baselines (a yardstick that did not train
  # proves nothing) or BicycleGAN's answers are not the more diverse; the results page is printed either way.
  verdict=0
  $PY scripts/demo_report.py "${bicycle[@]}" --phase test --num_test 20 --n_samples 5 || verdict=$?
  pix2pix=("${common[@]}" --name demo_bicyclegan_pix2pix$suffix --model pix2pix)
  $PY train.py "${pix2pix[@]}" --n_epochs 15 --n_epochs_decay 15 --display_id 0 --print_freq 1000 --batch_size 2
  echo "pix2pix with dropout on the same data (checkpoints/demo_bicyclegan_pix2pix$suffix):"
  $PY scripts/demo_report.py "${pix2pix[@]}" --phase test --num_test 20 --n_samples 5 || verdict=$?
  $PY scripts/demo_report.py --compare results/demo_bicyclegan$suffix/test_latest/demo_report.json \
    results/demo_bicyclegan_pix2pix$suffix/test_latest/demo_report.json || verdict=$?
  echo "results page: $(pwd)/results/demo_bicyclegan$suffix/val_latest/index.html"
  exit $verdict
fi

if [ "$task" = "cut" ] || [ "$task" = "cyclegan" ] || [ "$task" = "sb" ]; then
  # Unpaired: label maps -> rendered scenes (64 px, datasets/demo_scenes), trained on label maps and renders of
  # *different* random scenes, as cityscapes labels -> photos in CycleGAN's paper. The model must find by
  # itself which colour each class takes (only their shapes tell the classes apart) and the sky; the held-out
  # scenes are then scored against their true renders (L1/PSNR) beside the untrained model and the input.
  # 16 epochs of 100 images on 2 cores: CycleGAN about 8 minutes, CUT about 6, UNSB about 25.
  case "$task" in
    cut) model=(--name demo_cut$suffix --model cut --CUT_mode CUT --netG resnet_6blocks) ;;
    cyclegan) model=(--name demo_cyclegan$suffix --model cycle_gan --netG resnet_6blocks) ;;
    sb) model=(--name demo_sb$suffix --model sb --mode sb --lambda_SB 1.0 --lambda_NCE 1.0) ;;
  esac
  flags=("${model[@]}" --ngf 32 --ndf 32 --load_size 64 --crop_size 64 --seed "$seed")
  $PY train.py --dataroot datasets/demo_scenes "${flags[@]}" --n_epochs 8 --n_epochs_decay 8 --batch_size 2 \
    --display_id 0 --print_freq 400
  $PY test.py --dataroot datasets/demo_scenes "${flags[@]}" --num_test 20
  echo "${model[3]} (checkpoints/${model[1]}), scored on held-out scenes against their true renders:"
  # The demo's exit status is the report's verdict (1: the trained model did not beat both baselines).
  verdict=0
  $PY scripts/demo_report.py --dataroot datasets/demo_scenes --dataset_mode aligned --phase test "${flags[@]}" \
    --num_test 20 || verdict=$?
  echo "results page: $(pwd)/results/${model[1]}/test_latest/index.html"
  exit $verdict
fi

# pix2pix at 128x128 (unet_128, the reference's generator for that size), label map -> photo.
flags=(--dataroot datasets/demo_pix2pix --name demo_pix2pix$suffix --model pix2pix --netG unet_128
       --load_size 128 --crop_size 128 --seed "$seed")
# --val_freq 1 --save_best L1: held-out metrics after every epoch, and best_net_G.pth for the best one.
$PY train.py "${flags[@]}" --n_epochs 3 --n_epochs_decay 3 --batch_size 4 --display_id 0 --print_freq 100 \
  --val_freq 1 --save_best L1
$PY test.py "${flags[@]}" --num_test 20
$PY scripts/demo_report.py "${flags[@]}" --num_test 20
echo "results page: $(pwd)/results/demo_pix2pix$suffix/test_latest/index.html"
