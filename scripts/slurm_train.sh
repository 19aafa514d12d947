#!/usr/bin/env bash
# Multi-node training under SLURM: one torchrun agent per node, rendezvous on the first node.
#   sbatch scripts/slurm_train.sh --dataroot ./datasets/horse2zebra --name h2z --model cycle_gan
#SBATCH --job-name=img2img
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # one torchrun agent per node; it starts the per-GPU workers
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
set -euo pipefail
GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=${MASTER_PORT:-29500}
srun --kill-on-bad-exit=1 .venv/bin/python -m torch.distributed.run \
  --nnodes="$SLURM_NNODES" --nproc_per_node="$GPUS_PER_NODE" \
  --rdzv_backend=c10d --rdzv_endpoint="$head_node:$port" --rdzv_id="$SLURM_JOB_ID" \
  train.py "$@"
