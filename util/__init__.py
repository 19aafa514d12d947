"""The ground floor: helpers that know nothing of datasets, models or options (they import none of
data/, models/, options/), in rooms:

  distributed.py, console.py, errors.py, seeding.py, flag_types.py, frozen_options.py
                  starting processes and who this one is; messages; argparse types
  registry.py     finding a model, dataset mode, network family or logger by name, built-in or
                  the user's own module, all the same way
  util.py, html.py, image_pool.py, visualizer.py, get_data.py
                  the reference's modules, at the paths its users import
  training/       the training engine: where a run stands, checkpoints and exact resume, validation,
                  signals and the run lock
  evaluation/     image-translation metrics (L1, PSNR, SSIM, FID, KID) and test.py's metrics report
  display/        what a run shows and logs: console and loss log, HTML page, visdom, TensorBoard, wandb
"""
