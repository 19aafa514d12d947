"""High resolution (docs/high_resolution.md): gradient accumulation equals a larger batch, in one
process and in 2 processes; the multi-scale discriminator and feature matching train, save, resume,
validate and count their FLOPs; activation checkpointing leaves the gradients unchanged.

Tiny networks (--ngf 4 --ndf 4) on the 32 px demo images, float64 where runs are compared (as in
tests/test_distributed.py), trained in this process through train.main and shared by the tests of
the module; one 2-process run (as torchrun's workers), where DDP itself is what is proven.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from conftest import load_script, ranks
from helpers import assert_flops_match, conv_layer_flops, ok
from helpers_weights import assert_same_weights, assert_trained_alike, weights

pytestmark = pytest.mark.slow


TINY = ["--ngf", "4", "--ndf", "4", "--display_id", "0", "--num_threads", "0", "--seed", "0", "--no_html",
        "--no_progress", "--load_size", "32", "--crop_size", "32", "--n_epochs", "1", "--n_epochs_decay", "1"]
# Deterministic order and arithmetic, as the DDP equivalence tests; the pool draws at random (seeded).
EQUIVALENCE = ["--dtype", "float64", "--serial_batches", "--no_flip", "--print_freq", "4"]
CYCLE_GAN = ["--model", "cycle_gan", "--pool_size", "3", "--ema_decay", "0.5"]  # the moving average: once per step
PIX2PIX = ["--model", "pix2pix", "--netG", "resnet_6blocks", "--norm", "instance", "--no_dropout"]
# A training state after every optimizer step of 4 images, to continue from one between steps.
SAVES = ["--save_by_iter", "--save_latest_freq", "4"]
# The large-batch recipe (docs/distributed.md): rates x the global batch, warmed up over the first epoch's 8 images.
RECIPE = ["--scale_lr", "linear", "--warmup_epochs", "1"]


@pytest.fixture(scope="module")
def train():
    return load_script("train.py")


def args(root: Path, ckpt: Path, name: str, *extra: str) -> list[str]:
    return ["--dataroot", str(root), "--checkpoints_dir", str(ckpt), "--name", name, *TINY, *extra]


@pytest.fixture(scope="module")
def runs(train, paired_root, unpaired_root, tmp_path_factory) -> Path:
    """Each model with batch 4, and with 2 micro-batches of 2 (2 epochs of 8 images, float64);
    pix2pix also with --checkpoint_activations; pix2pix_l1: without a discriminator (--lambda_GAN 0);
    CycleGAN with the large-batch recipe, and without it at the rate of the recipe's first step."""
    ckpt = tmp_path_factory.mktemp("hires")
    plans = {"cycle_gan_batch4": (unpaired_root, CYCLE_GAN, ["--batch_size", "4"]),
             "cycle_gan_accum": (unpaired_root, CYCLE_GAN, ["--batch_size", "2", "--accum_steps", "2", *SAVES]),
             "pix2pix_batch4": (paired_root, PIX2PIX, ["--batch_size", "4"]),
             "pix2pix_accum": (paired_root, PIX2PIX, ["--batch_size", "2", "--accum_steps", "2"]),
             "pix2pix_l1_batch4": (paired_root, [*PIX2PIX, "--lambda_GAN", "0"], ["--batch_size", "4"]),
             "pix2pix_l1_accum": (paired_root, [*PIX2PIX, "--lambda_GAN", "0"],
                                  ["--batch_size", "2", "--accum_steps", "2"]),
             "pix2pix_checkpointed": (paired_root, PIX2PIX, ["--batch_size", "4", "--checkpoint_activations"]),
             "cycle_gan_recipe": (unpaired_root, CYCLE_GAN, ["--batch_size", "4", *RECIPE, *SAVES]),
             "cycle_gan_lr_0.0004": (unpaired_root, CYCLE_GAN, ["--batch_size", "4", "--lr", "0.0004", *SAVES])}
    for name, (root, model, extra) in plans.items():
        assert train.main(args(root, ckpt, name, *model, *EQUIVALENCE, *extra)) == 0, name
    return ckpt


def logged(run_dir: Path) -> tuple[list[str], list[str]]:
    """(the losses of each logged step, the learning rate of each epoch) from the run's logs."""
    lines = (run_dir / "loss_log.txt").read_text().splitlines()
    losses = [line.split(")", 1)[1] for line in lines if line.startswith("(epoch")]
    return losses, re.findall(r"learning rate [\d.]+ -> [\d.]+", (run_dir / "loss_log.txt").read_text())


# ----------------------------------------------------------------------------- --accum_steps
@pytest.mark.parametrize("model", ["cycle_gan", "pix2pix", "pix2pix_l1"])
def test_two_micro_batches_of_two_train_the_weights_of_one_batch_of_four(runs, model):
    # cycle_gan: the image pool sees the fakes in the order of the batch of 4; pix2pix: D steps on
    # the gradients of both micro-batches before G's loss judges with it
    assert_trained_alike(runs / f"{model}_batch4", runs / f"{model}_accum")
    if model == "cycle_gan":
        assert_trained_alike(runs / "cycle_gan_batch4", runs / "cycle_gan_accum", "latest_ema")
    losses, rates = logged(runs / f"{model}_accum")
    assert (losses, rates) == logged(runs / f"{model}_batch4")  # means over the micro-batches; one schedule
    assert len(losses) == 4 and rates and rates[-1] != rates[0]  # 2 steps per epoch logged; the rate decayed


def test_the_log_states_micro_batch_accumulation_processes_and_global_batch(runs):
    log = (runs / "cycle_gan_accum" / "loss_log.txt").read_text()
    assert "global batch = 4 (2 per micro-batch x 2 accumulation steps x 1 processes" in log
    assert "global batch = 4 (4 per process x 1 processes)" in (runs / "cycle_gan_batch4" / "loss_log.txt").read_text()


def test_an_accumulating_run_continued_between_optimizer_steps_ends_identical(train, runs, unpaired_root, tmp_path):
    """Checkpoints are written between optimizer steps only (never with half the micro-batches of a
    step applied): the state after the first step of epoch 2 continues to the same weights."""
    run_dir = tmp_path / "cycle_gan_accum"
    shutil.copytree(runs / "cycle_gan_accum", run_dir)
    for state in run_dir.glob("*_train_state.pth"):
        if state.name != "iter_12_train_state.pth":  # after the first step of epoch 2
            state.unlink()
    assert train.main(args(unpaired_root, tmp_path, "cycle_gan_accum", *CYCLE_GAN, *EQUIVALENCE, "--batch_size",
                           "2", "--accum_steps", "2", *SAVES, "--continue_train")) == 0
    resumed = (run_dir / "loss_log.txt").read_text().split("================ Training Loss")[-1]
    assert "(epoch: 2, iters: 8," in resumed and "(epoch: 2, iters: 4," not in resumed
    assert_same_weights(weights(runs / "cycle_gan_accum"), weights(run_dir), rtol=0, atol=0)


def test_two_processes_accumulating_two_micro_batches_equal_one_process_with_batch_four(runs, unpaired_root, tmp_path):
    """2 processes x 2 micro-batches of 1 (every micro-batch but the last in no_sync): the image
    pool, gathered over the ranks, sees the global batch in the same order; the large-batch recipe
    scales and warms up the rates by the global batch (4), not by a process's batch (1)."""
    ok(ranks("train.py", *args(unpaired_root, tmp_path, "ddp", *CYCLE_GAN, *EQUIVALENCE, *RECIPE, "--batch_size",
                               "1", "--accum_steps", "2")))
    assert_trained_alike(runs / "cycle_gan_recipe", tmp_path / "ddp")
    assert logged(tmp_path / "ddp")[1] == logged(runs / "cycle_gan_recipe")[1]
    assert "global batch = 4 (1 per micro-batch x 2 accumulation steps x 2 processes" in \
        (tmp_path / "ddp" / "loss_log.txt").read_text()


# ----------------------------------------------------------------------------- --scale_lr, --warmup_epochs
def test_the_recipe_scales_the_rates_by_the_global_batch_after_a_warm_up_by_images_seen(runs):
    """--scale_lr linear at global batch 4: 4 x --lr 0.0002; --warmup_epochs 1 (8 images): the first step of 4
    images at half of that, so its weights are those of a run without the recipe at --lr 0.0004 (the same
    arithmetic: 0.0002 x 4 x 4/8 is 0.0004 exactly); after the warm-up the schedule's rates, 4 x the plain ones."""
    assert_same_weights(weights(runs / "cycle_gan_recipe", "iter_4"), weights(runs / "cycle_gan_lr_0.0004", "iter_4"),
                        rtol=0, atol=0)
    with pytest.raises(AssertionError):  # the second step, at the full 0.0008, is another one
        assert_same_weights(weights(runs / "cycle_gan_recipe", "iter_8"),
                            weights(runs / "cycle_gan_lr_0.0004", "iter_8"))
    assert logged(runs / "cycle_gan_recipe")[1] == ["learning rate 0.0008000 -> 0.0004000",
                                                    "learning rate 0.0004000 -> 0.0000000"]
    assert logged(runs / "cycle_gan_batch4")[1][0] == "learning rate 0.0002000 -> 0.0001000"


def test_a_run_with_the_recipe_continued_within_its_warm_up_ends_identical(train, runs, unpaired_root, tmp_path):
    run_dir = tmp_path / "cycle_gan_recipe"
    shutil.copytree(runs / "cycle_gan_recipe", run_dir)
    for state in run_dir.glob("*_train_state.pth"):
        if state.name != "iter_4_train_state.pth":  # after the first step, half-way through the warm-up
            state.unlink()
    assert train.main(args(unpaired_root, tmp_path, "cycle_gan_recipe", *CYCLE_GAN, *EQUIVALENCE, "--batch_size",
                           "4", *RECIPE, *SAVES, "--continue_train")) == 0
    assert_same_weights(weights(runs / "cycle_gan_recipe"), weights(run_dir), rtol=0, atol=0)


def test_a_model_without_accumulation_phases_is_refused_and_a_changed_accum_steps_is_noted_on_continuing():
    from models.training.accumulation import check_accumulation
    from util.errors import UserError
    from util.resume_flags import check_changed_flags

    class Unsplit:  # what check_accumulation reads of a model that did not adopt the contract
        accumulation_phases = ()
        opt = type("Opt", (), {"model": "mypackage.my_model"})()

    check_accumulation(Unsplit(), 1)
    with pytest.raises(UserError,
                       match=r"--accum_steps 2: --model mypackage.my_model .*accumulation_phases.*--accum_steps 1"):
        check_accumulation(Unsplit(), 2)
    from options.train_options import TrainOptions
    classes = TrainOptions().build_parser(["--dataroot", "x"]).resume_classes()
    notes = check_changed_flags({"accum_steps": 1}, {"accum_steps": 2}, {"accum_steps": 1}, "latest_train_state.pth",
                                classes=classes)
    assert notes and "--accum_steps 2 (it trained with --accum_steps 1)" in notes[0]


def test_no_gradient_sync_keeps_ddp_gradients_local_until_the_block_ends(tmp_path):
    from util import distributed

    torch.distributed.init_process_group("gloo", store=torch.distributed.FileStore(str(tmp_path / "store"), 1),
                                         rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        plain = torch.nn.Linear(2, 2)
        with distributed.no_gradient_sync([wrapped, plain]):
            assert not wrapped.require_backward_grad_sync  # DDP's no_sync: no all-reduce in backward
        assert wrapped.require_backward_grad_sync
    finally:
        torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------- --checkpoint_activations
@pytest.mark.parametrize("netG, norm", [("resnet_6blocks", "instance"), ("unet_128", "batch")])
def test_checkpointed_generators_give_the_same_outputs_gradients_and_statistics(netG, norm):
    """Dropout on, batch norm in training mode: the recomputation replays the random draws and
    leaves the running statistics as one pass does. Tolerance: 1e-12 in float64 (found equal)."""
    from types import SimpleNamespace

    from models import networks

    flags = SimpleNamespace(netG=netG, ngf=4, norm=norm, no_dropout=False, init_type="normal", init_gain=0.02)
    torch.manual_seed(0)
    plain = networks.build_generator(flags, 3, 3).double()
    checkpointed = networks.build_generator(SimpleNamespace(**vars(flags), checkpoint_activations=True), 3, 3).double()
    checkpointed.load_state_dict(plain.state_dict())
    assert networks.family_of(netG).recomputes_activations(flags)
    # 6 residual blocks; 6 levels below the outermost
    assert sum(getattr(block, "recompute", False) for block in checkpointed.modules()) == 6
    assert not any(getattr(block, "recompute", False) for block in plain.modules())
    x = torch.randn(2, 3, 128, 128, dtype=torch.float64)
    results = []
    for net in (plain, checkpointed):
        torch.manual_seed(1)
        out = net(x)
        (out ** 2).mean().backward()
        results.append((out, [p.grad for p in net.parameters()], list(net.buffers())))
    (out_a, grads_a, buffers_a), (out_b, grads_b, buffers_b) = results
    assert torch.allclose(out_a, out_b, rtol=0, atol=1e-12)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(grads_a, grads_b))
    assert all(torch.equal(a, b) for a, b in zip(buffers_a, buffers_b))
    assert plain.state_dict().keys() == checkpointed.state_dict().keys()


def test_a_run_with_checkpointed_activations_trains_the_same_weights(runs):
    assert_same_weights(weights(runs / "pix2pix_batch4"), weights(runs / "pix2pix_checkpointed"), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- --netD multiscale
# Two scales of 2-layer PatchGANs: the coarse one sees the 32 px crops at 16 px (it needs 12).
MULTISCALE = ["--netD", "multiscale", "--num_D", "2", "--n_layers_D", "2"]


@pytest.fixture(scope="module")
def multiscale_run(train, paired_root, tmp_path_factory) -> Path:
    """pix2pix with the multi-scale D and feature matching, validated every epoch, a training state
    after every step (2 epochs of 4 images, batch 2)."""
    ckpt = tmp_path_factory.mktemp("multiscale")
    assert train.main(args(paired_root, ckpt, "pix2pix_ms", "--model", "pix2pix", "--netG", "resnet_6blocks",
                           *MULTISCALE, "--lambda_feat", "10", "--batch_size", "2", "--max_dataset_size", "4",
                           "--val_freq", "1", "--print_freq", "2", "--save_by_iter", "--save_latest_freq", "2")) == 0
    return ckpt / "pix2pix_ms"


def test_pix2pix_trains_with_multiscale_discriminators_and_feature_matching(multiscale_run):
    keys = torch.load(multiscale_run / "latest_net_D.pth", weights_only=True).keys()
    assert {key.split(".")[0] for key in keys} == {"scale0", "scale1"}  # one PatchGAN per scale, plain keys
    log = (multiscale_run / "loss_log.txt").read_text()
    losses = [float(value) for value in re.findall(r"G_feat: ([\d.]+)", log)]
    assert len(losses) == 4 and all(value > 0 for value in losses)
    assert "L1" in (multiscale_run / "val_log.txt").read_text()  # validated after each epoch


def test_a_multiscale_run_continued_from_its_first_step_ends_identical(train, multiscale_run, paired_root, tmp_path):
    run_dir = tmp_path / "pix2pix_ms"
    shutil.copytree(multiscale_run, run_dir)
    for state in run_dir.glob("*_train_state.pth"):
        if state.name != "iter_2_train_state.pth":
            state.unlink()
    assert train.main(args(paired_root, tmp_path, "pix2pix_ms", "--model", "pix2pix", "--netG", "resnet_6blocks",
                           *MULTISCALE, "--lambda_feat", "10", "--batch_size", "2", "--max_dataset_size", "4",
                           "--val_freq", "1", "--print_freq", "2", "--save_by_iter", "--save_latest_freq", "2",
                           "--continue_train")) == 0
    assert_same_weights(weights(multiscale_run), weights(run_dir), rtol=0, atol=0)


def test_test_py_translates_in_tiles_with_the_multiscale_runs_generator(multiscale_run, paired_root):
    test_script = load_script("test.py")
    results = multiscale_run.parent / "results"
    assert test_script.main(["--dataroot", str(paired_root), "--name", multiscale_run.name, "--checkpoints_dir",
                             str(multiscale_run.parent), "--results_dir", str(results), "--model", "pix2pix",
                             "--netG", "resnet_6blocks", "--ngf", "4", "--netD", "multiscale", "--load_size", "32",
                             "--crop_size", "32", "--preprocess", "none", "--tile", "16", "--tile_overlap", "8",
                             "--num_test", "2"]) == 0
    assert len(list((results / multiscale_run.name / "test_latest" / "images").glob("*_fake_B.png"))) == 2


def test_cycle_gan_trains_with_multiscale_discriminators(train, unpaired_root, tmp_path):
    assert train.main(args(unpaired_root, tmp_path, "cycle_gan_ms", "--model", "cycle_gan", *MULTISCALE,
                           "--num_D", "3", "--n_layers_D", "1", "--max_dataset_size", "2", "--n_epochs_decay",
                           "0")) == 0
    for name in ("D_A", "D_B"):
        keys = torch.load(tmp_path / "cycle_gan_ms" / f"latest_net_{name}.pth", weights_only=True).keys()
        assert {key.split(".")[0] for key in keys} == {"scale0", "scale1", "scale2"}


def test_the_multiscale_loss_is_the_mean_over_scales_for_every_gan_mode_and_side():
    # --gan_mode hinge scores the generator differently from the discriminator: that side must
    # reach every scale's loss.
    from models.losses.multiscale import MultiscaleGANLoss
    from models.networks import GANLoss
    predictions = [torch.randn(2, 1, 6, 6, dtype=torch.float64), torch.randn(2, 1, 3, 3, dtype=torch.float64)]
    for mode in ("lsgan", "vanilla", "hinge"):
        single = GANLoss(mode)
        for real in (True, False):
            for for_discriminator in (True, False):
                expected = sum(single(p, real, for_discriminator) for p in predictions) / 2
                got = MultiscaleGANLoss(single)(predictions, real, for_discriminator)
                assert torch.allclose(got, expected), (mode, real, for_discriminator)
    hinge = MultiscaleGANLoss(GANLoss("hinge"))
    assert torch.allclose(hinge(predictions, True, for_discriminator=False),
                          -(predictions[0].mean() + predictions[1].mean()) / 2)


def test_each_scale_judges_the_image_halved_once_more_and_one_scale_is_the_plain_patchgan():
    from models import networks
    from models.losses.multiscale import MultiscaleGANLoss, discriminator_features, feature_matching_loss

    torch.manual_seed(0)
    multiscale = networks.define_D(6, 4, "multiscale", 2, "instance", num_D=3)
    x = torch.randn(1, 6, 64, 64)
    assert [p.shape[-1] for p in multiscale(x)] == [14, 6, 2]  # 64, 32, 16 px through two stride-2 convs
    single = networks.define_D(6, 4, "multiscale", 2, "instance", num_D=1)
    plain = networks.define_D(6, 4, "n_layers", 2, "instance")
    plain.load_state_dict({key.removeprefix("scale0."): value for key, value in single.state_dict().items()})
    criterion = MultiscaleGANLoss(networks.GANLoss("lsgan"))
    assert torch.equal(criterion(single(x), True), criterion(plain(x), True))
    assert [len(scale) for scale in discriminator_features(multiscale, x)] == [4, 4, 4]  # 3 layer groups + prediction
    prediction, loss = feature_matching_loss(multiscale, x, x.clone())
    assert loss.item() == 0 and len(prediction) == 3


def test_benchmark_counts_the_multiscale_discriminators_flops_per_network(tmp_path):
    """The benchmark's step job (dev/bench) splits a cycle_gan step with --netD multiscale by
    network; each D is the sum of its scales, each scale passing as the plain PatchGAN does (the
    analytic count of tests/test_benchmark.py), within 1%."""
    from models import networks

    load_script("dev/benchmark.py")  # puts dev/ on sys.path, where the benchmark's package `bench` is
    from bench import jobs

    size, extra = 32, ["--ngf", "4", "--ndf", "4", *MULTISCALE]
    result = jobs.job_step({"kind": "step", "model": "cycle_gan", "size": size, "batch": 1, "device": "cpu",
                            "checkpoints_dir": str(tmp_path), "extra_args": extra, "warmup": 0, "min_steps": 1,
                            "max_steps": 1, "budget_s": 0, "count_flops": True})
    g = conv_layer_flops(networks.define_G(3, 3, 4, "resnet_9blocks", "instance"), (1, 3, size, size))
    scales = [conv_layer_flops(networks.define_D(3, 4, "n_layers", 2, "instance"), (1, 3, side, side))
              for side in (size, size // 2)]
    G, G1 = sum(g), g[0]
    D, D1 = sum(sum(s) for s in scales), sum(s[0] for s in scales)
    generator = {"forward": 3 * G, "backward": 2 * (2 * G - G1) + 2 * G}
    discriminator = {"forward": 3 * D, "backward": D + 2 * (2 * D - D1)}
    row = {"batch": 1, "flops_per_step": result["flops_batch1"], "flops_by_network": result["flops_by_network_batch1"]}
    assert_flops_match(row, {"G_A": generator, "G_B": generator, "D_A": discriminator, "D_B": discriminator})
