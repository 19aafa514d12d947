"""Export a trained generator to TorchScript and ONNX, then check both against PyTorch.

    # from a checkpoints folder, with the flags you give test.py
    python scripts/export.py --name facades_pix2pix --model pix2pix --direction BtoA
    python scripts/export.py --name horse2zebra --model cycle_gan --which_net G_B
    # from one weights file (e.g. a downloaded pretrained model)
    python scripts/export.py --weights checkpoints/horse2zebra_pretrained/latest_net_G.pth \
        --netG resnet_9blocks --norm instance --no_dropout

Writes <export_dir>/<epoch>_net_<net>.pt (TorchScript) and .onnx (default export_dir:
checkpoints/<name>/export). Both take NxCxHxW float images in [-1, 1] of any height and width
(at least `export_min_size`: 8 for resnets, 129 for unet_256) and return the same size: the
exported module pads by reflection to the generator's size multiple and crops back, as test.py
does with --preprocess none. The network is in eval mode (batch norm running statistics, no
dropout), i.e. what `test.py --eval` computes. A generator that takes a latent code beside the
image (BicycleGAN's: `--model bicycle_gan`) is exported with the code as a second input: forward(x, z),
ONNX inputs "input" and "code" (N x --nz, one code per image; draw them from a standard normal
distribution, or encode a reference image with the Translator's `encode`). A UNSB generator (`--model sb`)
is exported as one step of its bridge: forward(x, step, z), ONNX inputs "input", "step" (N int64) and "code"
(N x 4*ngf); the walk between steps is the caller's (docs/export.md, models/losses/bridge.py's walk).

A volume generator (a 3-D --netG, e.g. `--weights latest_net_G.pth --netG resnet_9blocks_3d`; a volume
--dataset_mode is assumed) is exported as the plain network for one window: it takes N x C x D x H x W
float volumes in [-1, 1] of exactly the --patch_size it trained on (default: the run's, from the
train_opt.json beside the weights) and returns the same size. Whole volumes are translated in
overlapping windows of that size, blended with Gaussian weights; that loop is not exported, so run it
yourself around the exported network (e.g. MONAI's sliding_window_inference with mode="gaussian",
sigma_scale=0.125 and overlap 0.5, as models/inference/windows.py does) to get test.py's outputs. It is
checked at the window size, in batches of 1 and 2; --check_sizes does not apply.

Each export is run on random inputs of the --check_sizes (batches of 1, then 2) and compared with
the PyTorch module; the largest absolute difference is printed, and the exit status is 1 if it exceeds --tolerance.
Before exporting, the generator's float32 result at the first check size is compared with float64
before its final tanh: weights whose output float32 arithmetic cannot pin down to --tolerance (any
two float32 runtimes could disagree by more) are refused with exit status 2 and nothing written.
ONNX goes through torch.onnx.export(dynamo=True) (needs the onnx and onnxscript packages, no
network); the ONNX check needs onnxruntime, and is skipped with a note when it is not installed.
A --weights file that an export would replace (generator.pt exported beside itself) is refused before
anything is loaded; weights that do not fit the flags are named with the flags that fit them, with the
--model whose flags they are (--model bicycle_gan for a generator taking a latent code).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import data  # noqa: E402
from models import builtin_model_names, create_model, network_refusal, networks  # noqa: E402
from models.inference import run_options, saved_generator
from models.inference.application import LatentPadToMultiple, PadToMultiple, StepPadToMultiple, export_min_size  # noqa: E402
from models.inference.windows import check_window  # noqa: E402
from models.losses import bridge  # noqa: E402
from models.sb_model import NUM_TIMESTEPS  # noqa: E402
from options.test_options import TestOptions  # noqa: E402
from util.console import setup_logging  # noqa: E402
from util.distributed import DistContext  # noqa: E402
from util.errors import UserError, exit_with_status, exits_on_user_error  # noqa: E402
from util.flag_types import Bounded, comma_choices, hw_sizes, non_negative_float  # noqa: E402
from util.paths import unwritable_folder_reason  # noqa: E402
from util.safe_files import atomic_write, atomic_write_by_name, refuse_overwriting_inputs  # noqa: E402

FORMATS = ("torchscript", "onnx")
EXTENSIONS = {"torchscript": ".pt", "onnx": ".onnx"}  # of the files each format writes


class ExportOptions(TestOptions):
    """test.py's flags (so the same command line picks the same checkpoint) plus export flags;
    --dataroot is not needed."""

    def initialize(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser = super().initialize(parser)
        for action in parser._actions:  # argparse has no public way to relax a required flag
            if action.dest == "dataroot":
                action.required = False
                action.default = ""
        # exporting continues no run: "silent" (util/resume_flags.py)
        parser.add_argument("--weights", type=str, default="", on_resume="silent",
                            help="a generator state_dict .pth to export instead of the checkpoints folder's")
        parser.add_argument("--which_net", type=str, default="", on_resume="silent",
                            help="network of the model to export, e.g. G_B of a cycle_gan (default: the generator "
                                 "that translates in the direction trained, e.g. G_A)")
        parser.add_argument("--export_dir", type=str, default="", on_resume="silent",
                            help="output folder (default: <checkpoints_dir>/<name>/export, or beside --weights)")
        parser.add_argument("--formats", type=comma_choices(*FORMATS), default="torchscript,onnx", on_resume="silent",
                            help="comma-separated: torchscript, onnx")
        parser.add_argument("--check_sizes", type=hw_sizes, default=None, on_resume="silent",
                            help="HxW sizes to compare on, comma-separated, e.g. 256x256,200x312 (default: two sizes "
                                 "that suit --netG)")
        parser.add_argument("--tolerance", type=non_negative_float, default=1e-4, on_resume="silent",
                            help="largest absolute difference from PyTorch that passes the check")
        parser.add_argument("--opset",type=Bounded(int, low=7, high=99, name="opset"),default=None,on_resume="silent",
                            help="ONNX opset (default: torch's)")
        return parser

    def add_selected_flags(self, parser: argparse.ArgumentParser, known: argparse.Namespace,
                           given: set[str]) -> argparse.ArgumentParser:
        """test.py's selections; a 3-D --netG with no --dataset_mode given gets a volume one (exporting reads
        no data, but the volume flags, --patch_size, come with it), whose --patch_size defaults to the run's."""
        parser = super().add_selected_flags(parser, known, given)
        if networks.family_of(known.netG).time_conditioned(known) and not hasattr(known, "num_timesteps"):
            # a bridge's generator (UNSB's) exported without --model sb, whose flag this is
            parser.add_argument("--num_timesteps", type=NUM_TIMESTEPS, default=bridge.DEFAULTS[0], on_resume="silent",
                                help="the steps of the bridge the generator was trained for: the exports are "
                                     "checked at step numbers below it")
        if ("dataset_mode" not in given and networks.family_of(known.netG).size_rule(known).dims == 3
                and data.spatial_dims(known) == 2):  # volumes, as --netG says
            known = argparse.Namespace(**{**vars(known), "dataset_mode": VOLUME_MODE})
            parser.set_defaults(dataset_mode=VOLUME_MODE)
            parser = data.get_option_setter(VOLUME_MODE)(parser, self.isTrain)
        if data.spatial_dims(known) == 3:
            parser.set_defaults(patch_size=None)  # None: the run's own (`window_size`)
        return parser

    def check_networks(self, parser: argparse.ArgumentParser, opt) -> None:
        """A generator of the data's dimensions; whatever --model says, as export calls the generator as its
        family says (a UNSB generator with its step and code, `StepPadToMultiple`), never the model."""
        refused = network_refusal(opt, calls=False)
        if refused:
            flag, why = refused
            parser.error(f"argument --{flag}: {why}")

    def check_combinations(self, parser: argparse.ArgumentParser, opt) -> None:
        """Refuse, before anything is loaded or written, check sizes below what --netG exports take (or any,
        for a volume generator) and an output folder that cannot be written (test.py's --results_dir is not used)."""
        if opt.check_sizes and networks.size_rule(opt.netG, opt).dims == 3:
            parser.error(f"argument --check_sizes: --netG {opt.netG} is exported for windows of --patch_size (D,H,W) "
                         f"and checked at that size; leave --check_sizes out and set --patch_size instead")
        min_size = export_min_size(opt.netG, opt)
        small = [f"{h}x{w}" for h, w in opt.check_sizes or () if min(h, w) < min_size]
        if small:
            parser.error(f"argument --check_sizes: {', '.join(small)} is below the {min_size}x{min_size} that "
                         f"--netG {opt.netG} exports take")
        reason = unwritable_folder_reason(export_dir(opt))
        if reason:
            flag = "--export_dir" if opt.export_dir else ("--weights" if opt.weights else "--checkpoints_dir/--name")
            parser.error(f"argument {flag}: cannot write the exports into {export_dir(opt)} ({reason}); "
                         f"choose another --export_dir")
        if opt.weights:  # a weights file named <stem>.pt (or .onnx) beside which the exports go would be replaced
            stem = os.path.splitext(os.path.basename(opt.weights))[0]
            outputs = [(f"the {name} export", os.path.join(export_dir(opt), stem + EXTENSIONS[name]))
                       for name in opt.formats]
            try:
                refuse_overwriting_inputs(outputs, [opt.weights], f"Pass an --export_dir of its own, e.g. "
                                          f"--export_dir {os.path.join(export_dir(opt), 'export')}.")
            except UserError as err:
                parser.error(f"argument --weights: {err}")


VOLUME_MODE = "single_volume"  # the dataset mode a 3-D --netG implies when none is given


def export_dir(opt) -> str:
    """Where the exports go: --export_dir, or beside --weights, or <checkpoints_dir>/<name>/export."""
    if opt.export_dir:
        return opt.export_dir
    if opt.weights:
        return os.path.dirname(os.path.abspath(opt.weights))
    return os.path.join(opt.checkpoints_dir, opt.name, "export")


def load_generator(opt) -> tuple[torch.nn.Module, str]:
    """The generator to export (CPU, float32, eval mode) and its file stem."""
    if opt.weights:
        keys = saved_generator.architecture_keys(opt.netG)
        architecture = {key: getattr(opt, key) for key in keys if hasattr(opt, key)}
        net = saved_generator.load_generator(opt.weights, architecture, flags_for=lambda seen: export_flags(opt, seen))
        return net.float().eval(), os.path.splitext(os.path.basename(opt.weights))[0]
    model = create_model(opt, DistContext())
    model.setup(opt)
    if not (opt.which_net or model.translators):
        raise UserError(f"--model {opt.model} has no generator that translates; pass --which_net to export one of "
                        f"its networks anyway.")
    which = opt.which_net or model.translators[0]  # the generator that translates as trained
    if which not in model.model_names:
        raise UserError(f"--which_net {which} is not a generator of --model {opt.model}; choose one of "
                        f"{', '.join(model.networks_with_role('generator'))}.")
    suffix = f"iter_{opt.load_iter}" if opt.load_iter > 0 else opt.epoch
    return getattr(model, "net" + which).float().eval(), f"{suffix}_net_{which}"


def export_flags(opt, seen: dict) -> str:
    """The flags of this script that build the architecture `seen` in the weights: those of the architecture,
    with the --model whose flags they are (e.g. BicycleGAN's --nz, --where_add, --upsample basic) where the
    command's own --model does not take them."""
    flags = saved_generator.describe_architecture(seen)
    for model in dict.fromkeys([opt.model, *builtin_model_names()]):
        command = ["--weights", opt.weights, *(["--model", model] if model != opt.model else []), *flags.split()]
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # a --model whose flags they are not: argparse's refusal
                ExportOptions().build_parser(command).parse_args(command)
        except SystemExit:
            continue
        return " ".join(command[2:])
    return flags


def window_size(opt) -> tuple[int, ...]:
    """The window a volume generator is exported for: --patch_size, else the --patch_size the run trained
    with (the train_opt.json beside the weights); checked against --netG."""
    folder = os.path.dirname(os.path.abspath(opt.weights)) if opt.weights \
        else os.path.join(opt.checkpoints_dir, opt.name)
    window = opt.patch_size or run_options.read_trained_options(folder).get("patch_size")
    if not window:
        raise UserError(f"--netG {opt.netG} is a volume generator, exported for windows of the --patch_size it "
                        f"trained on, but no train_opt.json in {folder} says which; pass --patch_size D,H,W.")
    window = tuple(int(side) for side in window)
    check_window(opt, window)
    return window


def check_sizes(opt) -> list[tuple[int, ...]]:
    """The spatial sizes the exports are checked at (batch 1, then 2): --check_sizes or two that suit
    --netG; for a volume generator its window twice."""
    if networks.size_rule(opt.netG, opt).dims == 3:
        return [window_size(opt)] * 2
    if opt.check_sizes:
        return opt.check_sizes
    multiple = networks.size_rule(opt.netG, opt).multiple
    if multiple >= 128:  # U-Nets: one exact multiple, one size that needs padding
        return [(multiple, multiple), (multiple + multiple // 2 + 3, multiple * 2)]
    return [(256, 256), (190, 318)]


def _before_last_tanh(module: torch.nn.Module, *x: torch.Tensor) -> torch.Tensor:
    """What `module` feeds its last nn.Tanh for inputs `x` (its output if it has none)."""
    tanhs = [m for m in module.modules() if isinstance(m, torch.nn.Tanh)]
    if not tanhs:
        return module(*x)
    seen = []
    handle = tanhs[-1].register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))
    try:
        module(*x)
    finally:
        handle.remove()
    return seen[-1]


def float32_rounding_error(module: torch.nn.Module, *x: torch.Tensor) -> tuple[float, float]:
    """(error, magnitude) before the last tanh of `module` (float32, eval mode) on `x`: the largest
    difference between its float32 and float64 results, and the largest float64 value.

    A float32 runtime (PyTorch, ONNX Runtime, the same one on another CPU) sums in its own order,
    so it lands anywhere within about `error` of the exact value; tanh's slope is at most 1, so two
    runtimes' outputs can differ by up to about 2 * `error` (and by 2, the whole range, when the
    values are so large that their rounding crosses zero)."""
    with torch.no_grad():
        single = _before_last_tanh(module, *x).double()
        exact = _before_last_tanh(copy.deepcopy(module).double(), *(t.double() if t.is_floating_point() else t
                                                                      for t in x))
    return (single - exact).abs().max().item(), exact.abs().max().item()


def example_inputs(batch: int, channels: int, size: tuple[int, ...], latent_size: int,
                   generator: torch.Generator, steps: int = 0) -> tuple[torch.Tensor, ...]:
    """Random images in [-1, 1]; for a generator taking a latent code, a standard normal code per image; for
    one step of a bridge (`steps` > 0), a step number below `steps` per image before the code."""
    x = torch.rand(batch, channels, *size, generator=generator) * 2 - 1
    step = (torch.randint(0, steps, (batch,), generator=generator),) if steps else ()
    return (x, *step, torch.randn(batch, latent_size, generator=generator)) if latent_size else (x,)


def input_names(steps: int) -> list[str]:
    """The exported module's inputs, in order (ONNX names; a plain generator takes the first only)."""
    return ["input", "step", "code"] if steps else ["input", "code"]


def refuse_ill_conditioned(module: torch.nn.Module, source: str, channels: int, size: tuple[int, ...],
                           tolerance: float, latent_size: int = 0, steps: int = 0) -> None:
    """Raise UserError if float32 rounding alone can move `module`'s output by more than
    `tolerance`: no check could then tell a faithful export from a broken one."""
    inputs = example_inputs(1, channels, size, latent_size, torch.Generator().manual_seed(1), steps)
    error, magnitude = float32_rounding_error(module, *inputs)
    if 2 * error <= tolerance:
        return
    spread = min(2.0, 2 * error)
    raise UserError(
        f"{source}: float32 arithmetic cannot pin this generator's output down to --tolerance {tolerance:g}. "
        f"Before its final tanh its values reach {magnitude:.2g}, and float32 rounding alone moves them by "
        f"{error:.2g} (float32 against float64 at {'x'.join(map(str, size))}), so two float32 runtimes (PyTorch, "
        f"ONNX Runtime, the same one on another CPU) can disagree on an output pixel by up to {spread:.2g}. "
        f"This happens when batch-norm running statistics do not match the activations (untrained, diverged "
        f"or edited weights). Export the weights of a trained model, or pass --tolerance {spread:.2g} to "
        f"export anyway.")


def export_torchscript(module: torch.nn.Module, path: str) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():  # torch.jit is deprecated upstream; the file format still loads everywhere
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(module)
        atomic_write(path, lambda f: torch.jit.save(scripted, f))  # an interrupted export leaves no half file
        return torch.jit.load(path)


def export_onnx(module: torch.nn.Module, path: str, channels: int, min_size: int, opset: int | None,
                latent_size: int = 0, window: tuple[int, ...] | None = None, steps: int = 0) -> None:
    """The ONNX file of `module`: input "input" (N x channels x H x W of any size from `min_size`, or
    N x channels x D x H x W of exactly the volume `window`), for one step of a bridge "step" (N int64),
    and with a latent code "code" (N x latent_size); output "output"."""
    try:
        import onnxscript  # noqa: F401  (torch's dynamo exporter needs it)
    except ImportError:
        raise UserError("ONNX export needs the onnx and onnxscript packages: pip install onnx onnxscript "
                        "(or drop onnx from --formats).") from None
    batch = torch.export.Dim("batch", min=1, max=4096)
    if window:  # a volume generator: one window size, any batch
        example = example_inputs(2, channels, window, latent_size, torch.Generator(), steps)
        image_shape = {0: batch}
    else:
        height = torch.export.Dim("height", min=min_size, max=16384)
        width = torch.export.Dim("width", min=min_size, max=16384)
        # Batch 2 and unequal sides in the example: torch.export would fix a dimension of size 1, or
        # tie two equal ones together.
        example = example_inputs(2, channels, (max(min_size, 64), max(min_size, 64) + 8), latent_size,
                                 torch.Generator(), steps)
        image_shape = {0: batch, 2: height, 3: width}
    # by position: the plain network of a volume generator names its argument `input`, the wrappers `x`
    shapes = (image_shape, *[{0: batch}] * (len(example) - 1))
    kwargs = {"opset_version": opset} if opset else {}
    atomic_write_by_name(path, lambda temporary: torch.onnx.export(
        module, example, temporary, dynamo=True, input_names=input_names(steps)[:len(example)],
        output_names=["output"], dynamic_shapes=shapes, verbose=False, **kwargs))


def run_onnx(path: str, steps: int = 0):
    """A callable running the ONNX file with onnxruntime, or None if it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return lambda *x: torch.from_numpy(session.run(None, dict(zip(input_names(steps), (t.numpy() for t in x))))[0])


@exits_on_user_error(memory_advice="lower --check_sizes")
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    opt = ExportOptions().parse(argv)
    formats = opt.formats
    sizes = check_sizes(opt)
    min_size = export_min_size(opt.netG, opt)
    net, stem = load_generator(opt)
    family = networks.family_of(opt.netG)
    # One step of a Schrödinger bridge (--model sb) takes the step number and a code beside the image; the
    # walk between steps is the caller's (docs/export.md), as the sliding window is for volumes.
    steps = opt.num_timesteps if family.time_conditioned(opt) else 0
    latent_size = family.step_code_size(opt) if steps else family.latent_size(opt)  # > 0: the code is an input
    rule = networks.size_rule(opt.netG, opt)
    window = sizes[0] if rule.dims == 3 else None
    if window:  # volumes: the plain network for one window; the sliding window is the user's (docstring)
        module = net
        print(f"volume generator: the exports take windows of {'x'.join(map(str, window))} voxels "
              f"(N x C x D x H x W); translate whole volumes in overlapping windows of that size")
    else:
        wrapper = StepPadToMultiple if steps else LatentPadToMultiple if latent_size else PadToMultiple
        module = wrapper(net, rule.multiple).eval()
    # G_B of a CycleGAN maps output_nc to input_nc channels: ask the network, not the flags.
    # A latent generator's first convolution may take the code too: its image has --input_nc channels.
    in_channels = opt.input_nc if latent_size else \
        next(m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))).in_channels
    source = opt.weights or f"{os.path.join(opt.checkpoints_dir, opt.name)} ({stem})"
    refuse_ill_conditioned(module, source, in_channels, sizes[0], opt.tolerance, latent_size, steps)
    out_dir = export_dir(opt)
    os.makedirs(out_dir, exist_ok=True)
    runners = {}
    if "torchscript" in formats:
        path = os.path.join(out_dir, stem + EXTENSIONS["torchscript"])
        runners["torchscript"] = (path, export_torchscript(module, path))
    if "onnx" in formats:
        path = os.path.join(out_dir, stem + EXTENSIONS["onnx"])
        export_onnx(module, path, in_channels, min_size, opt.opset, latent_size, window, steps)
        runners["onnx"] = (path, run_onnx(path, steps))
    worst = 0.0
    generator = torch.Generator().manual_seed(0)
    for name, (path, run) in runners.items():
        print(f"{name}: {path}")
        if run is None:
            print("  not checked: onnxruntime is not installed (pip install onnxruntime)")
            continue
        for i, size in enumerate(sizes):
            x = example_inputs(1 + i % 2, in_channels, size, latent_size, generator, steps)  # batch 1, then 2
            # Without TorchScript's profiling passes, which cost seconds on the first calls and
            # would only speed up later ones.
            with torch.no_grad(), torch.jit.optimized_execution(False):
                expected = module(*x)
                got = run(*x)
            diff = (got - expected).abs().max().item() if got.shape == expected.shape else float("inf")
            worst = max(worst, diff)
            print(f"  {'x'.join(map(str, size))}: output {tuple(got.shape)}, max abs difference from PyTorch "
                  f"{diff:.3e}")
    ok = worst <= opt.tolerance
    print(f"check {'passed' if ok else 'FAILED'}: largest difference {worst:.3e} (tolerance {opt.tolerance:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    exit_with_status(main())
