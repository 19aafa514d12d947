"""Launching as clusters do: SLURM with one task per process (srun, no torchrun) or one torchrun
per node, pre-emption with requeue, torchrun restarting a killed worker, and the Kubernetes example.

SLURM is not installed here. tests/fake_slurm/ holds stand-ins put first on PATH: `srun` starts
the tasks of a step on this machine with the variables srun gives them and forwards SIGTERM to
every task; `scontrol` records `requeue`. The batch scripts run unchanged under bash (with torchrun
itself in slurm_train.sh), and train.py runs for real (2 processes, gloo, CPU). The reference run and
the srun tasks' run are 2 ranks started by torch.multiprocessing with torchrun's and srun's variables
(tests/processes.py): what they show is train.py's side of the launch.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, free_port, run_in_process
from helpers import ENV, cycle_gan, interrupt_when_logged, run_two_ranks, train_command
from helpers_weights import assert_identical, final_weights
from options.train_options import TrainOptions
from util import distributed
from util.distributed import SLURM_PORT_BASE, SLURM_PORT_SPAN, launch_environment
from util.errors import UserError

FAKE_SLURM = ROOT / "tests" / "fake_slurm"
JOB_ID = "4242"


# ----------------------------------------------------------------------------- who am I: the launch environment


def srun_task(rank: int = 1, **extra: str) -> dict[str, str]:
    """The variables srun sets in task `rank` of a 4-task step on two nodes (job 4242)."""
    return {"SLURM_JOB_ID": JOB_ID, "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank % 2), "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_NODELIST": "gpu[07-08]",
            **extra}


@pytest.mark.parametrize("nodelist, first", [
    ("node[01-03,07],gpu5", "node01"),   # zero padding kept
    ("gpu5,node[1-2]", "gpu5"),
    ("rack[2-3]-node[04-05]", "rack2-node04"),
    ("a100-17.cluster.example.org", "a100-17.cluster.example.org"),
    ("node[7,12-14]", "node7"),
])
def test_srun_tasks_meet_on_the_first_host_of_the_slurm_node_list(nodelist, first):
    launch = launch_environment(srun_task(SLURM_STEP_NODELIST=nodelist))
    assert launch.master_addr == first
    assert launch.rendezvous_url == f"tcp://{first}:{launch.master_port}"


def test_srun_task_variables_give_rank_local_rank_and_world_size():
    launch = launch_environment(srun_task(3))
    assert (launch.launcher, launch.rank, launch.local_rank, launch.world_size) == ("srun", 3, 1, 4)
    # every task derives the same port from the job id, without talking to the others
    assert launch.master_port == SLURM_PORT_BASE + int(JOB_ID) % SLURM_PORT_SPAN < 32768
    assert launch_environment(srun_task(0)).master_port == launch.master_port


def test_master_addr_and_master_port_override_the_slurm_defaults():
    launch = launch_environment(srun_task(MASTER_ADDR="gpu07-ib", MASTER_PORT="23456"))
    assert (launch.master_addr, launch.master_port) == ("gpu07-ib", 23456)


def test_the_step_node_list_wins_over_the_job_node_list():
    launch = launch_environment(srun_task(SLURM_JOB_NODELIST="login1,gpu[07-08]", SLURM_STEP_NODELIST="gpu08"))
    assert launch.master_addr == "gpu08"
    without_step_list = {k: v for k, v in srun_task().items() if k != "SLURM_STEP_NODELIST"}
    assert launch_environment(without_step_list).master_addr == "gpu07"


def test_torchrun_variables_win_over_slurm_ones():
    # srun starting one torchrun per node: the workers carry both sets of variables
    launch = launch_environment(srun_task(1, RANK="5", LOCAL_RANK="2", WORLD_SIZE="16", MASTER_ADDR="gpu07",
                                          MASTER_PORT="29500"))
    assert (launch.launcher, launch.rank, launch.local_rank, launch.world_size) == ("torchrun", 5, 2, 16)
    assert launch.rendezvous_url == "env://"


def test_a_batch_shell_a_one_task_step_and_a_laptop_run_a_single_process():
    batch_shell = {"SLURM_JOB_ID": JOB_ID, "SLURM_NTASKS": "8", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                   "SLURM_JOB_NODELIST": "gpu[07-08]"}  # sbatch's own shell: no step variables
    assert launch_environment(batch_shell) is None
    assert launch_environment(srun_task(0, SLURM_STEP_NUM_TASKS="1", SLURM_NTASKS="1")) is None
    assert launch_environment({}) is None


@pytest.mark.parametrize("variables, named", [
    ({"SLURM_PROCID": "one"}, "SLURM_PROCID"),
    ({"SLURM_STEP_NODELIST": "gpu[07-"}, "SLURM_STEP_NODELIST"),
    ({"MASTER_PORT": "http"}, "MASTER_PORT"),
])
def test_malformed_launch_variables_are_refused_naming_the_variable(variables, named):
    with pytest.raises(UserError, match=named):
        launch_environment(srun_task(**variables))


@pytest.mark.parametrize("variables, named", [
    ({"RANK": "0", "WORLD_SIZE": "2"}, ("RANK=0, WORLD_SIZE=2", "MASTER_ADDR and MASTER_PORT", "are missing")),
    ({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "gpu07"},
     ("RANK=1, LOCAL_RANK=1, WORLD_SIZE=4, MASTER_ADDR=gpu07", "MASTER_PORT, which", "is missing")),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "gpu07", "MASTER_PORT": "29500"}, ("RANK 2 of WORLD_SIZE 2",)),
    ({"RANK": "0", "WORLD_SIZE": "0"}, ("RANK 0 of WORLD_SIZE 0",)),
], ids=["notebook leftovers", "no port", "rank outside the world", "empty world"])
def test_torchrun_variables_left_over_without_torchrun_are_refused_naming_them_and_the_fix(variables, named):
    with pytest.raises(UserError) as refused:
        launch_environment(variables)
    for text in (*named, "unset RANK LOCAL_RANK WORLD_SIZE", "torchrun --nproc_per_node"):
        assert text in str(refused.value), str(refused.value)


def test_a_single_process_world_needs_no_rendezvous_address():
    launch = launch_environment({"RANK": "0", "WORLD_SIZE": "1"})
    assert (launch.rank, launch.world_size) == (0, 1)  # init_distributed then runs alone


def test_processes_that_never_meet_at_the_rendezvous_are_told_in_one_paragraph(monkeypatch):
    """Rank 1 of 2 whose rank 0 was never started (left-over MASTER_ADDR/MASTER_PORT included): after
    --ddp_timeout, a UserError naming the address and the variables, not torch's DistNetworkError."""
    port = str(free_port())
    for name, value in {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": port}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as refused:
        distributed.init_distributed("cpu", timeout_s=1.0)
    message = str(refused.value)
    assert f"MASTER_ADDR=127.0.0.1, MASTER_PORT={port}" in message and "--ddp_timeout 1 s" in message
    assert "unset RANK" in message and not torch.distributed.is_initialized()


def test_only_srun_task_0_prints_a_user_error_others_say_who_they_are(monkeypatch, capsys):
    monkeypatch.setattr(distributed.time, "sleep", lambda seconds: None)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for rank in (0, 1):
        for name, value in srun_task(rank).items():
            monkeypatch.setenv(name, value)
        distributed.report_user_error("error: no such folder")
    assert capsys.readouterr().err.splitlines() == ["error: no such folder", "[rank 1] error: no such folder"]


def test_nccl_on_the_cpu_is_refused_and_gloo_may_share_a_gpu():
    with pytest.raises(UserError, match="--ddp_backend nccl needs CUDA"):
        distributed.pick_backend("nccl", torch.device("cpu"))
    assert distributed.pick_backend("auto", torch.device("cpu")) == "gloo"
    assert distributed.pick_backend("auto", torch.device("cuda", 0)) == "nccl"
    assert distributed.pick_backend("gloo", torch.device("cuda", 0)) == "gloo"


def test_each_process_takes_its_own_gpu_or_the_only_one_it_sees(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # a node's 4 GPUs, visible to every task
    assert distributed.pick_device("auto", 3) == torch.device("cuda", 3)
    with pytest.raises(UserError, match="only 4 GPUs are visible"):
        distributed.pick_device("cuda", 4)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # srun --gpus-per-task=1, or one shared GPU
    assert distributed.pick_device("cuda", 5) == torch.device("cuda", 0)


# ----------------------------------------------------------------------------- real runs


def two_rank_args(root: Path, ckpt: Path, name: str) -> list[str]:
    """test_resume's small CycleGAN run, 3 epochs: under DDP the ranks agree on stopping every
    10 steps, and 2 ranks take 4 steps an epoch, so a stop can happen after step 10."""
    args = cycle_gan(root, ckpt, name)
    args[args.index("--n_epochs") + 1] = "2"
    return args


def slurm_job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What sbatch gives a batch script on one node with 2 tasks, the fake srun and scontrol first
    on PATH, and a free port for the rendezvous."""
    return {**ENV, "PATH": f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": JOB_ID,
            "SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "localhost",
            "MASTER_PORT": str(free_port()), "PYTHON": sys.executable, "FAKE_SLURM_LOG": str(tmp_path / "scontrol.log"),
            **extra}


@pytest.fixture(scope="module")
def torchrun_weights(unpaired_root, tmp_path_factory) -> dict:
    ckpt = tmp_path_factory.mktemp("torchrun")
    run_two_ranks(two_rank_args(unpaired_root, ckpt, "run"))
    return final_weights(ckpt / "run")


def start_batch_job(script: str, args: list[str], env: dict) -> subprocess.Popen:
    """`bash scripts/<script> args` in a session of its own (so that a failed test can end it all)."""
    return subprocess.Popen(["bash", str(ROOT / "scripts" / script), *args], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop_when_logged(job: subprocess.Popen, log: Path, marker: str) -> str:
    """SIGTERM to the batch shell once `marker` is in `log`, as `#SBATCH --signal=B:TERM@120`
    does before the time limit; returns the job's output once it has ended."""
    deadline = time.time() + 240
    while not (log.exists() and marker in log.read_text()):
        assert job.poll() is None, f"ended before {marker!r}:\n{job.stdout.read()[-3000:]}"
        assert time.time() < deadline, f"{marker!r} never logged"
        time.sleep(0.02)
    job.send_signal(signal.SIGTERM)
    try:
        return job.communicate(timeout=240)[0]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("script, launch", [
    ("slurm_srun.sh", {}),  # one task per process, no torchrun: it trains what torchrun's workers train
    ("slurm_train.sh", {"SLURM_NTASKS": "1", "GPUS_PER_NODE": "2"}),  # one torchrun per node, 2 workers
])
def test_a_stopped_slurm_job_saves_is_requeued_and_continues_exactly(script, launch, torchrun_weights,
                                                                     unpaired_root, tmp_path):
    args = two_rank_args(unpaired_root, tmp_path, "job")
    output = stop_when_logged(start_batch_job(script, args, slurm_job_env(tmp_path, **launch)),
                              tmp_path / "job" / "loss_log.txt", "(epoch: 1, iters: 2,")
    assert (tmp_path / "scontrol.log").read_text() == f"requeue {JOB_ID}\n", output[-3000:]
    # both ranks stopped together at step 10 (the first where they compare notes) and saved there;
    # rank 0 finished its outputs (the loss plot comes last) before srun could end it
    saved = torch.load(tmp_path / "job" / "latest_train_state.pth", weights_only=True)
    assert saved["progress"]["total_iters"] == 20, output[-3000:]
    assert "stopped by a signal" in output and (tmp_path / "job" / "loss_plot.png").exists()

    # SLURM runs the requeued job's script again, telling it so with SLURM_RESTART_COUNT
    rerun = subprocess.run(["bash", str(ROOT / "scripts" / script), *args], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, env=slurm_job_env(tmp_path, SLURM_RESTART_COUNT="1", **launch))
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "resuming from" in rerun.stdout and "global batch = 2 (1 per process x 2 processes)" in rerun.stdout
    assert (tmp_path / "scontrol.log").read_text() == f"requeue {JOB_ID}\n"  # finished: not requeued again
    assert_identical(final_weights(tmp_path / "job"), torchrun_weights)


def test_a_two_process_run_whose_worker_is_killed_is_restarted_by_torchrun_and_ends_as_the_uninterrupted_run(
        torchrun_weights, unpaired_root, tmp_path):
    # CycleGAN: its image pool is one for all ranks, resumed too. With --max-restarts, torchrun restarts
    # the workers and they continue on their own: torchrun itself is the point, so it runs for real; the
    # uninterrupted run is the one the SLURM jobs end as. (2 ranks continuing a mid-epoch state by hand
    # with --continue_train: tests/test_fast_path.py's torchrun run, every speed flag.)
    args = two_rank_args(unpaired_root, tmp_path, "elastic")
    restarted = interrupt_when_logged(train_command(args, nproc=2, extra=("--max-restarts=1",)),
                                      tmp_path / "elastic" / "loss_log.txt", "(epoch: 2, iters: 2,", victim="worker")
    assert restarted.returncode == 0, restarted.output[-4000:]
    assert "resuming from" in restarted.output
    assert_identical(final_weights(tmp_path / "elastic"), torchrun_weights)


def test_a_requeued_job_stopped_before_its_first_save_starts_afresh(unpaired_root, tmp_path, monkeypatch, capsys):
    args = cycle_gan(unpaired_root, tmp_path, "early") + ["--max_dataset_size", "2"]  # an epoch of 2 images
    args[args.index("--n_epochs_decay") + 1] = "0"
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    result = run_in_process("train.py", *args, capsys=capsys)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" not in result.stdout and "error" not in result.stderr
    assert (tmp_path / "early" / "latest_net_G_A.pth").exists()


def test_the_batch_scripts_are_valid_bash():
    for script in ("slurm_lib.sh", "slurm_train.sh", "slurm_srun.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], check=True)


# ----------------------------------------------------------------------------- Kubernetes


def test_the_kubernetes_example_runs_train_py_under_elastic_torchrun_with_checkpoints_on_a_shared_volume():
    yaml = pytest.importorskip("yaml", reason="PyYAML (requirements-dev.txt) reads the manifest")
    claim, job = yaml.safe_load_all((ROOT / "docs" / "k8s" / "pytorchjob.yaml").read_text())
    assert claim["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in claim["spec"]["accessModes"]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    elastic = job["spec"]["elasticPolicy"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert elastic["rdzvBackend"] == "c10d" and elastic["minReplicas"] <= worker["replicas"] <= elastic["maxReplicas"]
    assert worker["restartPolicy"] == "OnFailure"
    pod = worker["template"]["spec"]
    # time for a step and a save after SIGTERM: torchrun itself waits 30 s for its workers
    assert pod["terminationGracePeriodSeconds"] > 30
    (container,) = pod["containers"]
    assert container["name"] == "pytorch"  # the name the operator looks for
    command = container["command"] + container["args"]
    assert command[0] == "torchrun"
    train_args = command[command.index("train.py") + 1:]
    opt = TrainOptions().parse(train_args)  # every flag is one of ours, with a valid value
    assert opt.auto_resume and opt.display_id <= 0  # restarted pods continue; no visdom server there
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["volumes"] if "persistentVolumeClaim" in v}
    checkpoint_volume = next(name for name, claim_name in claims.items() if claim_name == claim["metadata"]["name"])
    assert mounts[checkpoint_volume] == opt.checkpoints_dir
    assert opt.dataroot.startswith(mounts["datasets"])
