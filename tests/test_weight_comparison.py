"""The judge of every test that compares N processes with one, or micro-batches with one batch
(tests/helpers_weights.py's assert_trained_alike), knows which weights the arithmetic leaves open: the
parameters on which no output of their network depends (a convolution's bias that an instance norm cancels,
however the network's forward applies its layers, and a per-channel constant added before the norm), and
nothing else; and the parameters no gradient reaches, which must be equal."""
from __future__ import annotations

import torch
from torch import nn

from helpers import SB_TINY
from helpers_weights import parameters_without_influence, undetermined_weights
from models import networks
from models.networks import build_discriminator, build_generator
from models.networks.resnet_cond import code_size
from options.train_options import TrainOptions

CONVOLUTIONS = (nn.Conv2d, nn.ConvTranspose2d)


def conv_biases(net: nn.Module) -> list[str]:
    """The names of `net`'s convolution biases, in the order of its modules."""
    return [f"{name}.bias" for name, module in net.named_modules()
            if isinstance(module, CONVOLUTIONS) and module.bias is not None]


def without_influence(net: nn.Module, *args: torch.Tensor) -> set[str]:
    """`net`'s parameters on which its output for `args` does not depend, in float64."""
    return parameters_without_influence(net.double(), [(tuple(arg.double() if arg.is_floating_point() else arg
                                                               for arg in args), {})])


def test_unsbs_generator_whose_blocks_apply_their_layers_in_a_loop_has_each_cancelled_bias_found():
    # models/networks/resnet_cond.py: each block's conv_fin is a ModuleList its forward runs in a loop, after
    # conv_block's norm applied by hand; conv_block's convolution, the time embeddings and `style` are never used
    generator = build_generator(TrainOptions().parse(["--dataroot", "unused", *SB_TINY]), 3, 3)
    found = without_influence(generator, torch.randn(1, 3, 32, 32), torch.zeros(1, dtype=torch.long),
                              torch.randn(1, code_size(4)))
    unused = {f"model_res.{block}.{layer}.{kind}" for block in range(9) for kind in ("weight", "bias")
              for layer in ("conv_block.1", "Dense_time", "style")}
    unused |= {f"time_embed.{layer}.{kind}" for layer in (0, 2) for kind in ("weight", "bias")}
    assert found == {"model.1.bias", "model.4.bias", "model.8.bias", "model_upsample.1.bias", "model_upsample.5.bias",
                     *(f"model_res.{block}.conv_fin.2.bias" for block in range(9)), *unused}


def test_unsbs_discriminator_adding_the_time_embedding_before_each_norm_has_both_found():
    # models/networks/patchgan_cond.py: norm(conv1(x) + dense(time)[..., None, None]) from the second block on
    discriminator = build_discriminator(TrainOptions().parse(["--dataroot", "unused", *SB_TINY]), 3)
    found = without_influence(discriminator, torch.randn(2, 3, 32, 32), torch.tensor([0, 2]))
    assert found == {f"model_main.{block}.{key}" for block in (1, 2, 3)
                     for key in ("conv1.bias", "dense.weight", "dense.bias")}


def test_the_convolution_before_each_instance_norm_of_a_resnet_and_a_unet_is_found_and_no_other():
    resnet = networks.define_G(3, 3, 4, "resnet_6blocks", "instance")
    found = without_influence(resnet, torch.randn(1, 3, 32, 32))
    assert found == set(conv_biases(resnet)[:-1])  # every convolution but the output layer's is followed by a norm

    unet = networks.define_G(3, 3, 4, "unet_128", "instance")
    found = without_influence(unet, torch.randn(1, 3, 128, 128))
    norms = [module for module in unet.modules() if isinstance(module, nn.InstanceNorm2d)]
    assert found < set(conv_biases(unet)) and len(found) == len(norms)
    # the outermost level's convolutions (the first one down, the last one up) and the innermost one down have no norm
    outermost_down, *_, outermost_up = conv_biases(unet)
    innermost_down = max(conv_biases(unet), key=lambda key: key.count("."))
    assert not found & {outermost_down, outermost_up, innermost_down}


def test_a_bias_before_batch_norm_a_norm_with_running_statistics_an_in_place_layer_or_nothing_is_not_found():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4),                               # 0: batch norm
                        nn.Conv2d(4, 4, 3), nn.InstanceNorm2d(4, track_running_stats=True),  # 2: running statistics
                        nn.Conv2d(4, 4, 3), nn.ReLU(inplace=True), nn.InstanceNorm2d(4),     # 4: ReLU in between
                        nn.Conv2d(4, 4, 3), nn.InstanceNorm2d(4, affine=True),               # 7: cancelled
                        nn.Conv2d(4, 3, 3))                                                  # 9: nothing after it
    assert without_influence(net, torch.randn(2, 3, 24, 24)) == {"7.bias"}


def test_a_training_step_finds_what_unsbs_arithmetic_leaves_open(unpaired_root):
    found = undetermined_weights(TrainOptions().parse(["--dataroot", str(unpaired_root), *SB_TINY, "--dtype",
                                                       "float64"]))
    assert found.keys() == {"G", "D", "E", "F"}
    assert {"model.1.bias", "model_res.0.conv_fin.2.bias"} <= found["G"].without_influence
    assert {"model_main.1.conv1.bias", "model_main.1.dense.weight"} <= found["D"].without_influence
    assert "model_main.0.conv1.bias" not in found["D"].without_influence and not found["F"].without_influence
    # the generator's layers its forward never uses (frozen: no gradient reaches them), and nothing else
    unused = {f"model_res.{block}.{layer}.{kind}" for block in range(9) for kind in ("weight", "bias")
              for layer in ("conv_block.1", "Dense_time", "style")}
    unused |= {f"time_embed.{layer}.{kind}" for layer in (0, 2) for kind in ("weight", "bias")}
    assert found["G"].untrained == unused
    assert not found["D"].untrained and not found["E"].untrained and not found["F"].untrained
