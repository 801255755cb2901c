"""How each checkpoint family expects its images, as data: the per-channel mean and standard
deviation of `(pixels / 255 - mean) / std`, the resize interpolation and the evaluation crop
(the short side resized to `size / crop_fraction`, then the central square).

Plain Python, no Keras. A model records the name of its entry (`model.preprocessing`);
`preprocess_input`, `predict`, the input-range guard and the Hugging Face / KerasHub exports
read it from there. Sources: timm's `_cfg`s (DeiT in `deit.py`, DINOv2 in
`vision_transformer.py`) and transformers' `SiglipImageProcessor` defaults.
"""

import dataclasses

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """`mean` / `std`: per RGB channel, in [0, 1] units; `interpolation`: "bilinear" or
    "bicubic"; `crop_fraction`: the evaluation centre crop (1.0: none)."""

    mean: tuple
    std: tuple
    interpolation: str
    crop_fraction: float

    @property
    def offset(self):
        """`255 * mean`: what is subtracted from 0-255 pixels."""
        return tuple(255 * m for m in self.mean)

    @property
    def scale(self):
        """`255 * std`: what the centred pixels are divided by."""
        return tuple(255 * s for s in self.std)


PREPROCESSING = {
    # The paper's: (pixels - 127.5) / 127.5, i.e. [-1, 1]; bilinear resize.
    "vit": Preprocessing(HALF, HALF, "bilinear", 1.0),
    # DeiT (timm deit.py: ImageNet mean / std, bicubic, crop_pct 0.9).
    "deit": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bicubic", 0.9),
    # DINOv2 (timm vit_*_dinov2: ImageNet mean / std, bicubic, crop_pct 1.0).
    "dinov2": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bicubic", 1.0),
    # DINOv3 (transformers DINOv3ViTImageProcessorFast: ImageNet mean / std, bilinear resize to 224, no crop).
    "dinov3": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0),
    # EoMT (transformers EomtImageProcessor: ImageNet mean / std, bilinear resize, no crop).
    "eomt": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0),
    # EVA-02 (timm eva.py `_cfg`s: OpenAI CLIP mean / std, bicubic; the fine-tuned models uncropped).
    "eva02": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
    # SigLIP (transformers SiglipImageProcessor: mean / std 0.5, bicubic resize to the square).
    "siglip": Preprocessing(HALF, HALF, "bicubic", 1.0),
    # SigLIP 2 NaFlex (transformers Siglip2ImageProcessor: mean / std 0.5, bilinear resize to the patch budget).
    "siglip2": Preprocessing(HALF, HALF, "bilinear", 1.0),
    # CLIP (OpenAI's preprocessing, transformers CLIPImageProcessor, OpenCLIP: OpenAI CLIP mean / std, bicubic resize of
    # the short side to the input size, centre crop).
    "clip": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
    # AIMv2 (apple/aimv2-*'s CLIPImageProcessor: OpenAI CLIP mean / std, bicubic resize of the short side, centre crop).
    "aimv2": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
}
DEFAULT = "vit"


def check_name(name):
    """Raises ValueError (one line) unless `name` is an entry of `PREPROCESSING`."""
    if not isinstance(name, str) or name not in PREPROCESSING:
        raise ValueError(f"Unknown preprocessing={name!r}; expected one of {tuple(PREPROCESSING)}.")


def preprocessing(name=None):
    """The `Preprocessing` called `name` (None: the paper's, "vit"); a model gives its own."""
    name = DEFAULT if name is None else getattr(name, "preprocessing", name)
    check_name(name)
    return PREPROCESSING[name]
