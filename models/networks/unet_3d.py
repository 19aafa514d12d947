"""The volumetric U-Net generators (`--netG unet_8_3d` ... `unet_128_3d`): unet.py's U-Net built with
every layer in 3-D (`UnetGenerator(..., dims=3)`), for pix2pix (and CycleGAN) on medical volumes.
`num_downs` halvings (3 to 7: log2 of the number) with skip connections, so a volume whose sides are
2**num_downs is 1x1x1 at the bottleneck; sizes smaller than the 2-D ones because volumes are trained
in patches, and the shallow ones (8, 16) for thin slabs (24 slices) and restoration, where the detail
is carried by the skips rather than the bottleneck.

Layers and keys are the 2-D reference's (`model.model.0.weight`, nested one `model` per level) with
Conv3d and ConvTranspose3d (4x4x4, stride 2) and 3-D norms; the conv weights are 5-D, which tells
the two families' weights apart. BicycleGAN's latent input (unet_latent.py) has no 3-D version.
"""
from __future__ import annotations

from typing import Any, Mapping

from torch import nn

from models.networks.family import NetworkFamily, SizeRule
from models.networks.layers import (
    check_volume_size,
    get_norm_layer,
    norm_seen,
    resize_seen,
    use_resize_convolutions,
    wants_checkpointing,
)
from models.networks.unet import UnetFamily, UnetGenerator

_DEPTHS = {"unet_8_3d": 3, "unet_16_3d": 4, "unet_32_3d": 5, "unet_64_3d": 6, "unet_128_3d": 7}


class Unet3dFamily(NetworkFamily):
    """unet_8_3d ... unet_128_3d: volume sides that are multiples of 8 (16, 32, 64, 128)."""

    role = "generator"
    names = tuple(_DEPTHS)
    shape_flags = ("ngf", "norm", "no_dropout", "upsample")
    description = "unet_8_3d ... unet_128_3d: a U-Net for volumes whose sides are multiples of 8 (16, 32, 64, 128)"
    # pix2pix's U-Nets: 6 halvings fit the default 64-voxel patches
    stands_in_for = dict.fromkeys(UnetFamily.names, "unet_64_3d")

    @property
    def depth(self) -> int:
        return _DEPTHS[self.name]

    def build(self, flags: Any, input_nc: int, output_nc: int = 1) -> nn.Module:
        net = UnetGenerator(input_nc, output_nc, self.depth, flags.ngf, norm_layer=get_norm_layer(flags.norm, dims=3),
                            use_dropout=not flags.no_dropout, dims=3, recompute=wants_checkpointing(flags))
        if getattr(flags, "upsample", "transpose") != "transpose":
            use_resize_convolutions(net, flags.upsample)
        return net

    def recomputes_activations(self, flags: Any) -> bool:
        return True  # the levels below the outermost

    @classmethod
    def from_weights(cls, state: Mapping[str, Any]) -> dict | None:
        """Nested blocks, one "model" per level of depth, with 5-D conv weights (4-D ones are
        unet.py's); a U-Net's dropout has no weights, so the weights cannot say whether it had any."""
        first = state.get("model.model.0.weight")
        if first is None or first.ndim != 5:
            return None
        depth = max(key.split(".").count("model") for key in state) - 1
        name = next((name for name, levels in _DEPTHS.items() if levels == depth), None)
        if name is None or not {"model.model.3.weight", "model.model.3.1.weight"} & set(state):
            return None
        # ConvTranspose3d's weight is (in, out, ...); with --upsample resize a Conv3d's (out, in, ...)
        output_nc = (state["model.model.3.weight"].shape[1] if "model.model.3.weight" in state
                     else state["model.model.3.1.weight"].shape[0])
        return {"netG": name, "norm": norm_seen(state, "model.model.0"), "ngf": first.shape[0],
                "input_nc": first.shape[1], "output_nc": output_nc, **resize_seen(state)}

    def size_rule(self, flags: Any) -> SizeRule:
        multiple = 2 ** self.depth  # halved once per level, down to 1 voxel
        return SizeRule(multiple, multiple, dims=3)

    def check_input_size(self, flags: Any, *sizes: int) -> None:
        rule = self.size_rule(flags)
        check_volume_size(f"--netG {self.name} (halving the volume {self.depth} times)", rule.multiple, rule.minimum,
                          sizes)
