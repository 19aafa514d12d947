#!/usr/bin/env bash
# Multi-node training under SLURM, one torchrun agent per node that starts one worker per GPU;
# rendezvous on the first node. (One task per GPU without torchrun: scripts/slurm_srun.sh.)
#   sbatch scripts/slurm_train.sh --dataroot ./datasets/horse2zebra --name h2z --model cycle_gan
# Pre-emption and the time limit: the job saves, is requeued and continues (scripts/slurm_lib.sh).
#SBATCH --job-name=img2img
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # one torchrun agent per node; it starts the per-GPU workers
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --signal=B:TERM@120          # SIGTERM to this script 2 minutes before the time limit
#SBATCH --requeue                    # a stopped or pre-empted job goes back to the queue
#SBATCH --open-mode=append           # and its requeued run appends to the same log
set -euo pipefail
source scripts/slurm_lib.sh
PYTHON=${PYTHON:-.venv/bin/python}
GPUS_PER_NODE=${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
# The port: MASTER_PORT, or one derived from the job id (as util/distributed.py does for srun).
port=${MASTER_PORT:-$((10000 + SLURM_JOB_ID % 20000))}
run_preemptible srun --kill-on-bad-exit=1 "$PYTHON" -m torch.distributed.run \
  --nnodes="$SLURM_NNODES" --nproc_per_node="$GPUS_PER_NODE" \
  --rdzv_backend=c10d --rdzv_endpoint="$head_node:$port" --rdzv_id="$SLURM_JOB_ID" \
  train.py "$@"
