#!/usr/bin/env bash
# The demo: set up, make the built-in dataset, train pix2pix on it, test, and report.
# About 5-10 minutes on a 2-core CPU (most of the first run is installing PyTorch).
# `bash scripts/demo.sh cyclegan` trains CycleGAN on the unpaired demo instead (slower);
# `bash scripts/demo.sh cut` trains FastCUT on it and scores it (docs/cut.md);
# `bash scripts/demo.sh bicyclegan` trains BicycleGAN where one input has many right answers (docs/bicyclegan.md);
# `bash scripts/demo.sh volumes` trains pix2pix on 3-D MR -> CT phantoms (docs/volumes.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
task=${1:-pix2pix}
$PY scripts/make_demo_dataset.py --out datasets --size 128 $([ "$task" = cut ] && echo --task cut) \
  $([ "$task" = bicyclegan ] && echo --task bicyclegan) $([ "$task" = volumes ] && echo --task volumes)

if [ "$task" = "volumes" ]; then
  # 3-D: MR-like phantoms -> their CT in Hounsfield units (bone is dark in MR like air, bright in CT: only
  # its place tells them apart). pix2pix with a 3-D U-Net trained on 32^3 patches, applied to whole
  # held-out volumes in blended sliding windows; NIfTI outputs over their inputs in results/.../volumes/.
  # About 5 minutes on 2 cores (docs/volumes.md).
  flags=(--dataroot datasets/demo_volumes --name demo_volumes --model pix2pix --dataset_mode aligned_volume
         --input_nc 1 --output_nc 1 --data_range 0 1200 -1000 1500 --netG unet_32_3d --ngf 16 --patch_size 32
         --seed 0)
  $PY train.py "${flags[@]}" --netD n_layers_3d --n_layers_D 2 --ndf 16 --patches_per_volume 8 --batch_size 2 \
    --foreground_fraction 0.5 --n_epochs 10 --n_epochs_decay 10 --display_id 0 --print_freq 1000 --val_freq 5 \
    --save_best MAE
  $PY test.py "${flags[@]}" --eval
  $PY scripts/demo_report.py "${flags[@]}" --eval --num_test 2
  echo "results page: $(pwd)/results/demo_volumes/test_latest/index.html"
  exit 0
fi

if [ "$task" = "bicyclegan" ]; then
  # Label maps -> scenes whose colours are turned by a random hue: many renderings are right. BicycleGAN
  # learns to give several (its samples, one per latent code); pix2pix, trained on the same data with
  # dropout (the reference's only source of variety), gives one. Both are scored on held-out images:
  # fidelity (L1/PSNR of BicycleGAN's encoded output, pix2pix's output) against the untrained model,
  # and diversity (mean pairwise distance of 5 answers per input).
  # 128 px (BicycleGAN's 128 px networks), 16 filters wide, 30 epochs each: about 10 minutes on 2 cores.
  common=(--dataroot datasets/demo_bicyclegan --load_size 128 --crop_size 128 --netG unet_128 --ngf 16 --ndf 16
          --seed 0)
  bicycle=("${common[@]}" --name demo_bicyclegan --model bicycle_gan --netE resnet_128 --nef 16
           --netD basic_128_multi --netD2 basic_128_multi)
  $PY train.py "${bicycle[@]}" --n_epochs 15 --n_epochs_decay 15 --display_id 0 --print_freq 1000 --batch_size 2
  $PY test.py "${bicycle[@]}" --num_test 10 --n_samples 5
  echo "BicycleGAN (checkpoints/demo_bicyclegan):"
  $PY scripts/demo_report.py "${bicycle[@]}" --phase test --num_test 20 --n_samples 5
  pix2pix=("${common[@]}" --name demo_bicyclegan_pix2pix --model pix2pix)
  $PY train.py "${pix2pix[@]}" --n_epochs 15 --n_epochs_decay 15 --display_id 0 --print_freq 1000 --batch_size 2
  echo "pix2pix with dropout on the same data (checkpoints/demo_bicyclegan_pix2pix):"
  $PY scripts/demo_report.py "${pix2pix[@]}" --phase test --num_test 20 --n_samples 5 || true
  $PY scripts/demo_report.py --compare results/demo_bicyclegan/test_latest/demo_report.json \
    results/demo_bicyclegan_pix2pix/test_latest/demo_report.json
  echo "results page: $(pwd)/results/demo_bicyclegan/val_latest/index.html"
  exit 0
fi

if [ "$task" = "cut" ]; then
  # FastCUT (one generator, PatchNCE) on solid -> striped shapes, then scored offline on the test
  # images beside their true striped counterparts (datasets/demo_cyclegan_pairs): L1/PSNR of the
  # trained and the untrained generator, and of the CycleGAN demo's G_A when that run exists.
  # At 64 px (the demo's images scaled down), 16 epochs: about 4 minutes on 2 idle cores.
  flags=(--dataroot datasets/demo_cyclegan --name demo_fastcut --model cut --CUT_mode FastCUT
         --netG resnet_6blocks --ngf 32 --ndf 32 --load_size 64 --crop_size 64 --seed 0)
  $PY train.py "${flags[@]}" --n_epochs 8 --n_epochs_decay 8 --display_id 0 --print_freq 400 --batch_size 2
  $PY test.py "${flags[@]}" --num_test 10
  scored=(--dataroot datasets/demo_cyclegan_pairs --dataset_mode aligned --num_test 10)
  echo "FastCUT (checkpoints/demo_fastcut):"
  $PY scripts/demo_report.py "${flags[@]:2}" "${scored[@]}" || true  # identity is a hard baseline here
  if [ -e checkpoints/demo_cyclegan/latest_net_G_A.pth ]; then
    echo "CycleGAN (checkpoints/demo_cyclegan, from bash scripts/demo.sh cyclegan):"
    $PY scripts/demo_report.py --name demo_cyclegan --model cycle_gan --netG resnet_6blocks --ngf 32 --ndf 32 \
      --load_size 64 --crop_size 64 --seed 0 "${scored[@]}" || true  # the same 64 px images
  fi
  echo "results page: $(pwd)/results/demo_fastcut/test_latest/index.html"
  exit 0
fi

if [ "$task" = "cyclegan" ]; then
  flags=(--dataroot datasets/demo_cyclegan --name demo_cyclegan --model cycle_gan --netG resnet_6blocks
         --ngf 32 --ndf 32 --load_size 128 --crop_size 128 --seed 0)
  $PY train.py "${flags[@]}" --n_epochs 2 --n_epochs_decay 2 --display_id 0 --print_freq 50 --batch_size 2
  $PY test.py --dataroot datasets/demo_cyclegan/testA --name demo_cyclegan --model test --model_suffix _A \
    --no_dropout --netG resnet_6blocks --ngf 32 --load_size 128 --crop_size 128 --num_test 10
  echo "results page: $(pwd)/results/demo_cyclegan/test_latest/index.html"
  exit 0
fi

# pix2pix at 128x128 (unet_128, the reference's generator for that size), label map -> photo.
flags=(--dataroot datasets/demo_pix2pix --name demo_pix2pix --model pix2pix --netG unet_128
       --load_size 128 --crop_size 128 --seed 0)
# --val_freq 1 --save_best L1: held-out metrics after every epoch, and best_net_G.pth for the best one.
$PY train.py "${flags[@]}" --n_epochs 3 --n_epochs_decay 3 --batch_size 4 --display_id 0 --print_freq 100 \
  --val_freq 1 --save_best L1
$PY test.py "${flags[@]}" --num_test 20
$PY scripts/demo_report.py "${flags[@]}" --num_test 20
echo "results page: $(pwd)/results/demo_pix2pix/test_latest/index.html"
