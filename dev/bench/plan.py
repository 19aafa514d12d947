"""What a benchmark run measures: the configurations, sizes and step counts of the full and
--quick presets, and the targets it reports against."""
from __future__ import annotations

from dataclasses import dataclass, field

MODELS = ("cycle_gan", "pix2pix")
# Opt-in (--models cut,fastcut,bicycle_gan,pix2pix_l1,sb): the step section only, beside CycleGAN's and pix2pix's;
# their train.py flags. pix2pix_l1: pix2pix without its discriminator (--lambda_GAN 0, the restoration recipe's).
STEP_ONLY_MODELS = {"cut": ["--model", "cut", "--CUT_mode", "CUT"],
                    "fastcut": ["--model", "cut", "--CUT_mode", "FastCUT"],
                    "bicycle_gan": ["--model", "bicycle_gan"],
                    "pix2pix_l1": ["--model", "pix2pix", "--lambda_GAN", "0"],
                    # UNSB with its examples' SB weight; a step walks a random number of its 5 steps first
                    "sb": ["--model", "sb", "--lambda_SB", "1.0"]}
# Volumes (--models pix2pix_3d,cycle_gan_3d): the "volumes" section only, at the plan's patch sizes. pix2pix's
# volume default unet_64_3d takes multiples of 64, so its measurement uses unet_32_3d (64 and 96 fit).
VOLUME_MODELS = {"pix2pix_3d": ["--model", "pix2pix", "--dataset_mode", "aligned_volume", "--data_range", "0", "1",
                                "--netG", "unet_32_3d"],
                 "cycle_gan_3d": ["--model", "cycle_gan", "--dataset_mode", "unaligned_volume",
                                  "--data_range", "0", "1"]}
STEP_ONLY_MODELS.update(VOLUME_MODELS)
# The step's batch where a model cannot train on one image: BicycleGAN splits it into an encoded and a random half.
STEP_BATCH = {"bicycle_gan": 2}
# A configuration is "fp32" (plain eager float32) or settings joined by "+".
SETTINGS: dict[str, dict] = {
    "bf16": {"amp": "bf16"},
    "fp16": {"amp": "fp16"},
    "channels_last": {"channels_last": True},
    "compile": {"compile": True},
    "fused_adam": {"fused_adam": True},
    # Not a setting of ours: the step written plainly (dev/straightforward_step.py), in fp32.
    "straightforward": {"straightforward": True},
}
STRAIGHTFORWARD = "straightforward"
CONFIGS = ["fp32", STRAIGHTFORWARD, "bf16", "channels_last", "compile", "fused_adam", "bf16+channels_last",
           "bf16+compile", "channels_last+compile", "channels_last+compile+fused_adam", "bf16+channels_last+compile",
           "bf16+channels_last+compile+fused_adam"]
CUDA_CONFIGS = ["fp16", "fp16+channels_last", "fp16+channels_last+compile", "fp16+channels_last+compile+fused_adam"]
BASELINE = "fp32"
SECTIONS = ("peaks", "step", "loop", "scaling", "ddp", "checkpointing", "volumes")
# What the project aims for (issue 6); reported as met or not, never enforced. "not slower than the
# straightforward step" allows 5%, the spread of repeated timings on a quiet machine.
TARGETS = {"speedup": {"cycle_gan": 2.0, "pix2pix": 1.5}, "not_slower_than_straightforward": 1.05,
           "compile_not_slower": 1.05,  # compile_probe.TOLERANCE: a run keeps compiling up to 5% slower
           "data_wait_fraction": 0.05, "ddp_efficiency": 0.9}
# The generators' smallest input multiple: unet_256 halves 8 times, so it needs multiples of 256.
SIZE_MULTIPLE = {"resnet_9blocks": 4, "unet_256": 256}
# sb's multiple is the resnets'.
DEFAULT_NETG = {"cycle_gan": "resnet_9blocks", "pix2pix": "unet_256", "cut": "resnet_9blocks",
                "fastcut": "resnet_9blocks", "bicycle_gan": "unet_256", "pix2pix_l1": "unet_256",
                "sb": "resnet_9blocks"}


@dataclass
class Timing:
    """Steps of one measurement: untimed warm-up, then at least `min_steps` and at most
    `max_steps` timed ones, stopping after `budget_s` seconds once `min_steps` are done."""
    warmup: int
    min_steps: int
    max_steps: int
    budget_s: float

    def spec(self) -> dict:
        return {"warmup": self.warmup, "min_steps": self.min_steps, "max_steps": self.max_steps,
                "budget_s": self.budget_s}


@dataclass
class Plan:
    """What one run measures. `full_plan()` and `quick_plan()` are the two presets."""
    name: str
    step_size: dict[str, int]
    configs: list[str]
    step: Timing
    compile_warmup: int
    loop_size: dict[str, int]
    loop: Timing
    scaling_sizes: dict[str, list[int]]
    scaling_batches: list[int]
    scaling_batch_size: dict[str, int]
    scaling: Timing
    ddp: list[dict]
    ddp_warmup: int
    peak_reps: int
    repeats: int = 1  # passes over the step configurations, alternating their order
    peak_sizes: dict = field(default_factory=dict)  # conv_batch, matmul_size; the worker's defaults if empty
    sections: set[str] = field(default_factory=lambda: set(SECTIONS))
    # train.py flags added to every job's command line (e.g. --ngf 8 --ndf 8 for small networks)
    network_args: list[str] = field(default_factory=list)
    # --checkpoint_activations: the plain fp32 step at this size (batch 1) without and with it
    checkpointing_size: dict[str, int] = field(default_factory=dict)
    # --models pix2pix_3d,cycle_gan_3d: the plain fp32 step at these patch sizes (voxels a side, batch 1),
    # without and with --checkpoint_activations: FLOPs, time and peak memory
    volume_sizes: list[int] = field(default_factory=list)
    # fp16 configurations, measured only on CUDA (the CPU has no fp16 gradient scaling to compare)
    cuda_configs: list[str] = field(default_factory=list)
    # one cold step by default: a 512 px CycleGAN step takes minutes on 2 CPU cores, and the peak
    # memory, the point of the section, is reached in the first step
    checkpointing: Timing = field(default_factory=lambda: Timing(warmup=0, min_steps=1, max_steps=1, budget_s=0.0))

    def step_configs(self, device: str) -> list[str]:
        """The step section's configurations on `device`: the fp16 ones only where CUDA scales gradients."""
        return list(self.configs) + (list(self.cuda_configs) if device == "cuda" else [])

    def to_json(self) -> dict:
        data = dict(vars(self))
        data["sections"] = sorted(self.sections)
        for key in ("step", "loop", "scaling", "checkpointing"):
            data[key] = vars(getattr(self, key))
        return data


def full_plan() -> Plan:
    return Plan(
        name="full",
        step_size={"cycle_gan": 256, "pix2pix": 256, "cut": 256, "fastcut": 256, "bicycle_gan": 256, "pix2pix_l1": 256,
                   "sb": 256},
        configs=list(CONFIGS),
        step=Timing(warmup=2, min_steps=4, max_steps=15, budget_s=40.0),
        repeats=2,
        compile_warmup=3,
        loop_size={"cycle_gan": 256, "pix2pix": 256},
        loop=Timing(warmup=2, min_steps=8, max_steps=30, budget_s=60.0),
        scaling_sizes={"cycle_gan": [128, 256, 512], "pix2pix": [256, 512]},
        scaling_batches=[1, 4, 8],
        scaling_batch_size={"cycle_gan": 256, "pix2pix": 256},
        scaling=Timing(warmup=1, min_steps=3, max_steps=10, budget_s=30.0),
        ddp=[{"model": "cycle_gan", "size": 256, "steps": 4, "extra_args": []},
             {"model": "pix2pix", "size": 256, "steps": 10, "extra_args": ["--norm", "syncbatch"]}],
        ddp_warmup=1,
        peak_reps=10,
        checkpointing_size={"cycle_gan": 512, "pix2pix": 512},
        volume_sizes=[64, 96],
        cuda_configs=list(CUDA_CONFIGS),
    )


def quick_plan() -> Plan:
    return Plan(
        name="quick",
        # pix2pix's unet_256 takes multiples of 256 only, so it stays at 256 (it is the cheap one).
        step_size={"cycle_gan": 64, "pix2pix": 256, "cut": 64, "fastcut": 64, "bicycle_gan": 256, "pix2pix_l1": 256,
                   "sb": 64},
        configs=["fp32", STRAIGHTFORWARD, "bf16", "channels_last", "fused_adam", "bf16+channels_last"],
        step=Timing(warmup=1, min_steps=3, max_steps=5, budget_s=6.0),
        compile_warmup=2,
        loop_size={"cycle_gan": 64, "pix2pix": 256},
        loop=Timing(warmup=1, min_steps=3, max_steps=8, budget_s=6.0),
        scaling_sizes={"cycle_gan": [32, 64], "pix2pix": [256]},
        scaling_batches=[1, 2],
        scaling_batch_size={"cycle_gan": 64, "pix2pix": 256},
        scaling=Timing(warmup=1, min_steps=3, max_steps=3, budget_s=0.0),
        ddp=[{"model": "cycle_gan", "size": 64, "steps": 3, "extra_args": []}],
        ddp_warmup=1,
        peak_reps=5,
        peak_sizes={"conv_batch": 1, "matmul_size": 1536},
        checkpointing_size={"cycle_gan": 64, "pix2pix": 256},
        checkpointing=Timing(warmup=1, min_steps=2, max_steps=2, budget_s=0.0),
        volume_sizes=[32],
    )


def config_spec(config: str) -> dict:
    """The train.py settings of a configuration name, e.g. "bf16+compile"."""
    spec = {"amp": "none", "channels_last": False, "compile": False, "fused_adam": False, "straightforward": False}
    if config != BASELINE:
        for setting in config.split("+"):
            spec.update(SETTINGS[setting])
    return spec


def peak_dtype(config: str) -> str:
    """The dtype whose conv peak a configuration's achieved FLOP/s is compared with."""
    return {"none": "fp32", "bf16": "bf16", "fp16": "fp16"}[config_spec(config)["amp"]]
