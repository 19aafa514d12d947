#!/usr/bin/env bash
# Multi-node training under SLURM, one task per GPU started by srun itself (no torchrun): each
# process reads its rank from SLURM_PROCID, SLURM_LOCALID and SLURM_STEP_NUM_TASKS and meets the
# others on the first node of the job (util/distributed.launch_environment). Port: MASTER_PORT, or
# 10000 + job id % 20000. (One torchrun per node instead: scripts/slurm_train.sh.)
#   sbatch scripts/slurm_srun.sh --dataroot ./datasets/horse2zebra --name h2z --model cycle_gan
# Pre-emption and the time limit: the job saves, is requeued and continues (scripts/slurm_lib.sh).
#SBATCH --job-name=img2img
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8          # one task per GPU
#SBATCH --gpus-per-node=8            # each task takes cuda:SLURM_LOCALID (or its only visible GPU)
#SBATCH --cpus-per-task=4            # data-loading workers (--num_threads) per process
#SBATCH --time=24:00:00
#SBATCH --signal=B:TERM@120          # SIGTERM to this script 2 minutes before the time limit
#SBATCH --requeue                    # a stopped or pre-empted job goes back to the queue
#SBATCH --open-mode=append           # and its requeued run appends to the same log
set -euo pipefail
source scripts/slurm_lib.sh
PYTHON=${PYTHON:-.venv/bin/python}
run_preemptible srun --kill-on-bad-exit=1 "$PYTHON" train.py "$@"
