"""Apply a trained model to images and write an HTML page of the results.

    python test.py --dataroot ./datasets/facades --name facades_pix2pix --model pix2pix --direction BtoA
    python test.py --dataroot ./datasets/horse2zebra/testA --name horse2zebra_pretrained --model test --no_dropout
    torchrun --nproc_per_node=2 test.py ...   # the ranks share the images; rank 0 writes the page

Images go to --results_dir/--name/<phase>_<epoch>/images/ (a folder apart from those the dataset reads: one
that is, lies inside or contains them is refused when the options are parsed; 8-bit PNG previews; data of
higher precision or other channel counts also at full precision in .../full_precision/, data/output_files.py),
the page to .../index.html, and for paired data (aligned, colorization) the mean L1/PSNR/SSIM of the outputs
(and of the do-nothing baseline) to metrics.json. --eval_metrics adds FID/KID
(util/evaluation/metrics_report.py, docs/evaluation.md).

With --preprocess none each image keeps its size and aspect ratio: it is padded by reflection to a
size the generator takes and the output cropped back. --tile N translates large images in blended
N x N tiles, and volumes in sliding windows of --patch_size (models/inference/application.py,
models/inference/windows.py: the way the Translator and validation apply a generator too; docs/evaluation.md).
"""
from __future__ import annotations

import logging
import os

from data import create_dataset, spatial_dims
from data.image_folder import image_batches, list_images
from data.output_files import FOLDER as FULL_PRECISION_FOLDER
from data.output_files import VOLUME_FOLDER, write_full_precision, write_volume_outputs
from models import create_model, networks
from models.inference.application import inference_views
from models.inference.latent_codes import draw_latent_codes
from models.inference.windows import Windows, check_tiling, check_window, receptive_radius
from models.network_views import NetworkViews
from options.inference_flags import exact_budget
from options.test_options import TestOptions, results_folder
from util import distributed, html
from util.console import print0, setup_logging
from util.errors import UserError, exit_with_status, exits_on_user_error
from util.evaluation.metrics_report import (
    InferenceMetrics,
    check_distribution_inputs,
    describe_distribution,
    paired_summary,
    volume_units,
)
from util.host_memory import keep_freed_memory
from util.safe_files import atomic_write_json
from util.seeding import choose_kernels, seed_everything
from util.util import parse_display_channels
from util.visualizer import save_result_images

logger = logging.getLogger(__name__)


def run_test(opt, ctx: distributed.DistContext) -> str | None:
    """Translate the first --num_test images; returns the path of the results page (rank 0, with
    dominate installed; None otherwise)."""
    seed_everything(opt.seed if opt.seed is not None else 0)
    if spatial_dims(opt) == 3:
        check_volume_options(opt)
    else:
        check_tiling(opt.netG, opt.tile, opt.tile_overlap, opt)
    reference = list_images(opt.fid_reference) if opt.eval_metrics and opt.fid_reference else []
    check_distribution_inputs(opt, reference)  # fail before translating, not after
    dataset = create_dataset(opt, 0, ctx, limit=opt.num_test, size_rule=networks.size_rule(opt.netG, opt))
    model = create_model(opt, ctx)
    if opt.n_samples and model.latent_size() == 0:
        raise UserError(f"--n_samples {opt.n_samples}: the generator of --model {opt.model} takes no latent code, so "
                        f"it gives one answer per input; leave --n_samples out (it is for models with many "
                        f"answers per input, whose generator takes a code).")
    model.setup(opt)  # loads <epoch>_net_<name>.pth
    volumes = spatial_dims(opt) == 3
    # Any image size works: the generators pad and crop back (models/inference/application.py). Other preprocess
    # modes give the --crop_size/--load_size the user chose, which stays checked below so that a bad
    # size is named. Whole volumes of any size are translated in sliding windows of --patch_size.
    any_size = opt.preprocess == "none" or opt.tile > 0 or volumes
    if volumes:
        windows = None if opt.whole_volumes else Windows.for_volumes(opt.patch_size, opt.window_overlap,
                                                                     opt.window_batch)
    else:
        windows = Windows.for_tiles(opt.tile, opt.tile_overlap) if opt.tile else None
        if opt.tile:
            print0(tiling_note(opt))
    web_dir = results_folder(opt)  # apart from --dataroot (checked when the options were parsed)
    display_channels = parse_display_channels(opt.display_channels)  # a bad value fails before any folder is made
    os.makedirs(os.path.join(web_dir, "images"), exist_ok=True)
    print0(f"creating web directory {web_dir}")
    if opt.eval or model.evaluates_in_eval_mode:  # --model sb always, as UNSB's test
        model.eval()  # batch norm uses running statistics, dropout is off
    nets = inference_views(model.named_networks(), model.networks_with_role("generator"), opt, windows,
                           None if volumes and not opt.whole_volumes else exact_budget(opt))
    paired = dataset.dataset.paired
    pairs = model.scored_pairs(paired)
    metrics = InferenceMetrics(opt, pairs, model.input_visual, ctx.device, paired,
                               model.sample_visuals[0] if opt.n_samples else None,
                               volume_units=volume_units(dataset.dataset, pairs, model.visual_domains(opt)))
    rows = translate_all(opt, model, nets, dataset, web_dir, metrics, display_channels, check_sizes=not any_size)
    # every rank takes part, with its share of the reference images: the metrics gather all ranks' images
    summary = metrics.compute(image_batches(reference[ctx.rank::ctx.world_size], 1))
    all_rows = sorted(row for rank_rows in distributed.gather_objects(rows) for row in rank_rows)
    if not ctx.is_main:
        return None
    return write_results(opt, web_dir, summary, all_rows)


def translate_all(opt, model, nets: NetworkViews, dataset, web_dir: str, metrics: InferenceMetrics,
                  display_channels, check_sizes: bool) -> list[tuple]:
    """Translate this rank's images with the model's networks as `nets` runs them, saving the first of
    each batch (like the reference) as 8-bit previews in web_dir/images and, where the data need it,
    at full precision; returns a (dataset index, name, files, labels) row for each."""
    image_dir = os.path.join(web_dir, "images")
    full_precision_dir = os.path.join(web_dir, FULL_PRECISION_FOLDER)
    domains = model.visual_domains(opt)  # which input files' format each visual is written in
    # --results_layout original: also images/<folder>/<name>.png, where CUT's and UNSB's evaluation commands look
    folders = model.result_folders if opt.results_layout == "original" else None
    rows = []
    for index, data in zip(dataset.sampler.indices[::opt.batch_size], dataset):
        if check_sizes:
            networks.check_image_size(opt, *data["A"].shape[-2:], discriminator=False)
        model.set_input(data)
        model.test(nets)  # forward under torch.no_grad
        img_path = model.get_image_paths()
        if index % 5 == 0:
            print(f"processing ({index:04d})-th image... {img_path}")
        visuals = model.get_current_visuals()
        visuals.update(sampled_visuals(model, nets, opt, index, len(data["A"])))  # --n_samples: N more answers
        if data["A"].ndim == 5:  # volumes: NIfTI (or .npy) over the inputs; images/ shows their middle slices
            write_volume_outputs(os.path.join(web_dir, VOLUME_FOLDER), visuals, data, opt, domains)
        else:
            write_full_precision(full_precision_dir, visuals, data, opt, domains)
        metrics.update(visuals)
        rows.append((index, *save_result_images(image_dir, visuals, img_path, opt.aspect_ratio, display_channels,
                                                folders)))
    return rows


def check_volume_options(opt) -> None:
    """Volumes are translated in sliding windows: the tiling and latent-sample flags of pictures do not apply."""
    if opt.tile:
        raise UserError(f"--tile {opt.tile} cuts pictures into tiles; volumes are translated in sliding windows of "
                        f"--patch_size (with --window_overlap, --window_batch): drop --tile (docs/volumes.md).")
    if opt.n_samples:
        raise UserError(f"--n_samples {opt.n_samples}: the volume generators take no latent code; drop --n_samples.")
    check_window(opt, opt.patch_size)


def sampled_visuals(model, nets: NetworkViews, opt, index: int, batch_size: int) -> dict:
    """--n_samples N: the model's `sample_visuals` for N latent codes, named `<visual>_random<k>`. The
    codes are drawn from --seed (default 0): with --sync the same for every input, otherwise from the
    input's position in the dataset, so each output can be made again alone."""
    if opt.n_samples == 0:
        return {}
    seed = opt.seed if opt.seed is not None else 0
    codes = draw_latent_codes(opt.n_samples, model.latent_size(), seed if opt.sync else seed * 1_000_003 + index)
    samples = {}
    for k, code in enumerate(codes):
        model.set_latent(code.expand(batch_size, -1))
        model.test(nets)
        samples.update({f"{name}_random{k}": getattr(model, name) for name in model.sample_visuals})
    model.set_latent(None)  # the model's own code again (e.g. the one it encodes)
    return samples


def write_results(opt, web_dir: str, summary: dict, rows: list[tuple]) -> str | None:
    """Print the metrics, write metrics.json and the results page of all ranks' `rows`; returns the
    page's path (None without dominate)."""
    image_dir = os.path.join(web_dir, "images")
    full_precision_dir = os.path.join(web_dir, FULL_PRECISION_FOLDER)
    notes = []  # for the top of the page
    if "images" in summary:
        text = ", ".join(paired_summary(summary))
        print(f"metrics over {summary['images']} images (L1 in [-1, 1] units; identity = input vs target): {text}")
        notes.append(f"Mean over {summary['images']} test images: {text}")
    if opt.eval_metrics:
        print(describe_distribution(summary))
        notes.append(describe_distribution(summary))
    if os.path.isdir(full_precision_dir):
        notes.append("8-bit previews; the outputs at the data's own precision and channels are in "
                     f"{full_precision_dir}")
    if summary:
        atomic_write_json(os.path.join(web_dir, "metrics.json"), summary, indent=1)
    if not html.available():
        logger.warning(f"{html.MISSING}; no results page, the images are in {image_dir}")
        return None
    webpage = html.HTML(web_dir, f"Experiment = {opt.name}, Phase = {opt.phase}, Epoch = {opt.epoch}")
    for note in notes:
        webpage.add_text(note)
    for _, name, files, labels in rows:
        webpage.add_header(name)
        webpage.add_images(files, labels, files, width=opt.display_winsize)
    return webpage.save()


def tiling_note(opt) -> str:
    """How tiled output will compare with whole-image output (docs/evaluation.md)."""
    radius = receptive_radius(opt.netG, opt)
    if opt.norm in ("batch", "syncbatch") and not opt.eval:
        return ("note: --tile with batch norm but without --eval normalises each tile with its own statistics; "
                "add --eval for tiles that match whole-image inference.")
    if opt.norm == "instance" or radius is None:
        why = "each tile has its own statistics" if opt.norm == "instance" else "its bottleneck sees the whole tile"
        return (f"note: with --norm {opt.norm} --netG {opt.netG} tiles cannot equal whole-image inference ({why}); "
                f"overlaps are cross-faded so that no seams show.")
    if opt.tile_overlap < 4 * radius:
        return (f"note: --tile_overlap {opt.tile_overlap} is below 4 x the receptive radius ({radius} px) of "
                f"--netG {opt.netG}: outputs may differ slightly from whole-image inference along the overlaps; "
                f"--tile_overlap {4 * radius} (with --tile {max(opt.tile, -(-8 * radius // 4) * 4)} or more) makes "
                f"them equal.")
    return f"tiles of {opt.tile} px, overlap {opt.tile_overlap}: equal to whole-image inference up to rounding."


@exits_on_user_error(report=distributed.report_user_error, memory_advice=(  # one paragraph, exit status 2
    "translate large pictures exactly in less memory (a lower --exact_memory) or in tiles (--tile 512), or "
    "lower --load_size (volumes: --window_batch, --patch_size)"))
def start_and_test(opt) -> int:
    """Distributed start, translation and results page; every rank waits for rank 0's page."""
    ctx = distributed.init_distributed(opt.device, opt.ddp_timeout, opt.ddp_backend)
    page = run_test(opt, ctx)
    if page is not None:
        print0(f"results page: {os.path.abspath(page)}")
    # Under torchrun the other ranks wait for rank 0's results page: a rank that tears its process
    # group down while a peer is still busy can be aborted by the launcher (seen once with gloo).
    distributed.barrier()
    return 0


@distributed.record_errors  # under torchrun, a crash in any rank is reported once, with its traceback
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    keep_freed_memory()  # a step's freed activations are reused, not faulted in again page by page
    opt = TestOptions().parse(argv)
    choose_kernels(opt.deterministic, opt.preprocess)  # before any CUDA work
    try:
        return start_and_test(opt)
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    exit_with_status(main())
