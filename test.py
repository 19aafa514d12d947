"""Apply a trained model to images and write an HTML page of the results.

    python test.py --dataroot ./datasets/facades --name facades_pix2pix --model pix2pix --direction BtoA
    python test.py --dataroot ./datasets/horse2zebra/testA --name horse2zebra_pretrained --model test --no_dropout

Images go to --results_dir/--name/<phase>_<epoch>/images/, the page to .../index.html.
"""
from __future__ import annotations

import os
import sys

from data import create_dataset
from models import create_model
from options.test_options import TestOptions
from util import distributed, html
from util.errors import EXIT_USER_ERROR, UserError, describe
from util.seeding import seed_everything
from util.visualizer import save_images


def run_test(opt, ctx: distributed.DistContext) -> str:
    """Translate up to --num_test images; returns the path of the results page."""
    seed_everything(opt.seed if opt.seed is not None else 0)
    dataset = create_dataset(opt, 0, ctx.rank, ctx.world_size, ctx.device.type)
    model = create_model(opt, ctx)
    model.setup(opt)  # loads <epoch>_net_<name>.pth
    web_dir = os.path.join(opt.results_dir, opt.name, f"{opt.phase}_{opt.epoch}")
    if opt.load_iter > 0:
        web_dir = f"{web_dir}_iter{opt.load_iter}"
    print(f"creating web directory {web_dir}")
    webpage = html.HTML(web_dir, f"Experiment = {opt.name}, Phase = {opt.phase}, Epoch = {opt.epoch}")
    if opt.eval:
        model.eval()  # batch norm uses running statistics, dropout is off
    for i, data in enumerate(dataset):
        if i >= opt.num_test:
            break
        model.set_input(data)
        model.test()  # forward under torch.no_grad
        img_path = model.get_image_paths()
        if i % 5 == 0:
            print(f"processing ({i:04d})-th image... {img_path}")
        save_images(webpage, model.get_current_visuals(), img_path, aspect_ratio=opt.aspect_ratio,
                    width=opt.display_winsize)
    return webpage.save()


def main(argv: list[str] | None = None) -> int:
    opt = TestOptions().parse(argv)
    try:
        ctx = distributed.init_distributed(opt.device, opt.ddp_timeout)
        page = run_test(opt, ctx)
        print(f"results page: {os.path.abspath(page)}")
    except UserError as err:
        print(describe(err), file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    finally:
        distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
