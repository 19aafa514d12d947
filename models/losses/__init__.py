"""What a model's losses are made of: the adversarial losses (gan.py), CUT's PatchNCE and its patch
sampler (patchnce.py), pix2pixHD's multi-scale discriminator losses (multiscale.py), differentiable
augmentation of what a discriminator sees (diff_augment.py) and UNSB's Schrödinger bridge (bridge.py).

Each module looks only down (at models/networks/ and util/): a loss never reaches into training or
inference. `from models.losses import GANLoss` is kept for code written when this was one module.
"""
from models.losses.gan import GAN_MODES, GANLoss, cal_gradient_penalty  # noqa: F401 (compatibility face)
