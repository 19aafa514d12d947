# Sourced by scripts/slurm_train.sh and scripts/slurm_srun.sh: run the training step so that a job
# stopped by SLURM saves, goes back to the queue and continues exactly.
#
# How the stop travels: `#SBATCH --signal=B:TERM@120` sends SIGTERM to this batch shell only
# (B:), 2 minutes before the time limit; SLURM's pre-emption signals it as well. The trap below
# passes it to the srun of the training step, which forwards it to every task: train.py (or the
# torchrun agent, which passes it to its workers) finishes the current step, saves a `latest`
# checkpoint on all ranks together and exits with status 143. Once the step has ended, the job is
# requeued (`#SBATCH --requeue` allows it); SLURM starts this script again with
# SLURM_RESTART_COUNT > 0, and train.py then continues from the newest training state, as
# `--continue_train` would (starting afresh if the job was stopped before its first save).

# run_preemptible COMMAND...: run COMMAND (the srun line); requeue the job if it was asked to stop.
# Returns COMMAND's exit status.
run_preemptible() {
  local stop_requested=0 status=0 step_pid
  trap 'stop_requested=1; kill -TERM "$step_pid" 2>/dev/null || true' TERM
  "$@" &
  step_pid=$!
  # A trapped signal ends `wait` early; wait again until the step has really finished (saved).
  while true; do
    status=0
    wait "$step_pid" || status=$?
    kill -0 "$step_pid" 2>/dev/null || break
  done
  trap - TERM
  if [ "$stop_requested" = 1 ]; then
    echo "slurm: job ${SLURM_JOB_ID} was asked to stop; the step ended with status ${status}; requeueing it" >&2
    scontrol requeue "${SLURM_JOB_ID}"
  fi
  return "$status"
}
