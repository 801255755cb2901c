"""Images to an image tower's input as a checkpoint's `preprocessor_config.json` says
(transformers' `CLIPImageProcessor`, `SiglipImageProcessor`, `Siglip2ImageProcessor`): resize (to
a fixed size, or the shorter side to `shortest_edge`), centre crop, rescale, normalise; NumPy
only (`keras_vit.data.images`: Pillow's antialiased bicubic, or bilinear)."""

import dataclasses
import os

import numpy as np

from keras_vit.data import images as image_ops
from keras_vit.data.naflex_inputs import check_count
from keras_vit.preprocessing import preprocessing as preprocessing_of

# PIL's resampling codes in preprocessor_config.json -> keras_vit.data.images' interpolations
RESAMPLE = {2: "bilinear", 3: "bicubic"}


@dataclasses.dataclass(frozen=True)
class ImageProcessing:
    """`size`: `(height, width)` every image is resized to, or None; `shortest_edge`: the shorter
    side's length (aspect kept) before the `crop` square; `mean` / `std` per channel of
    `pixels * rescale`; `max_num_patches`: a NaFlex tower's patch budget (its images are
    resized to it instead, `keras_vit.data.naflex_inputs`)."""

    size: tuple = None
    shortest_edge: int = None
    crop: int = None
    interpolation: str = "bicubic"
    rescale: float = 1 / 255
    mean: tuple = (0.5, 0.5, 0.5)
    std: tuple = (0.5, 0.5, 0.5)
    max_num_patches: int = None

    def to_dict(self):
        return dataclasses.asdict(self)


def _size(config, path):
    size = config.get("size")
    if isinstance(size, dict) and {"height", "width"} <= size.keys():
        return (int(size["height"]), int(size["width"])), None
    if isinstance(size, dict) and "shortest_edge" in size:
        return None, int(size["shortest_edge"])
    if isinstance(size, int) and not isinstance(size, bool):
        return None, size
    raise ValueError(f"{path}: size={size!r}; expected {{'height', 'width'}} or {{'shortest_edge'}}.")


def from_preprocessor_config(config, path="preprocessor_config.json"):
    """The `ImageProcessing` of a transformers image processor's settings (a dict)."""
    resample = config.get("resample", 3)
    if resample not in RESAMPLE:
        raise ValueError(f"{path}: resample={resample!r} is not supported; expected 2 (bilinear) or 3 (bicubic).")
    mean, std = config.get("image_mean", (0.5,) * 3), config.get("image_std", (0.5,) * 3)
    if not config.get("do_normalize", True):
        mean, std = (0.0,) * 3, (1.0,) * 3
    rescale = float(config.get("rescale_factor", 1 / 255)) if config.get("do_rescale", True) else 1.0
    if "max_num_patches" in config:
        return ImageProcessing(None, None, None, RESAMPLE[resample], rescale, tuple(mean), tuple(std),
                               check_count(f"{path}: max_num_patches", config["max_num_patches"]))
    size, shortest = _size(config, path) if config.get("do_resize", True) else (None, None)
    crop = config.get("crop_size") if config.get("do_center_crop", False) else None
    if isinstance(crop, dict):
        if crop.get("height") != crop.get("width"):
            raise ValueError(f"{path}: crop_size={crop!r}; only square crops are supported.")
        crop = crop["height"]
    if shortest is not None and crop is None:
        raise ValueError(f"{path}: a shortest_edge resize without a centre crop gives images of different shapes; "
                         "expected do_center_crop with a crop_size.")
    return ImageProcessing(size, shortest, crop, RESAMPLE[resample], rescale, tuple(mean), tuple(std))


def _rgb(value):
    """A mean / std of OpenCLIP's `preprocess_cfg` (one number, as its `image_transform` takes, or three) as
    three floats; None for anything else."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if len(values) not in (1, 3) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return tuple(float(v) for v in values) * (3 // len(values))


def from_open_clip_config(config, path="open_clip_config.json"):
    """The `ImageProcessing` of an `open_clip_config.json` (OpenCLIP's `image_transform` for
    evaluation): `preprocess_cfg`'s size (else `vision_cfg.image_size`), `resize_mode` "shortest"
    (the shorter side, then the centre square; its default) or "squash", interpolation, mean / std
    (default OpenAI's)."""
    model = config.get("model_cfg") if isinstance(config.get("model_cfg"), dict) else {}
    vision = model.get("vision_cfg") if isinstance(model.get("vision_cfg"), dict) else {}
    pre = config.get("preprocess_cfg") or {}
    if not isinstance(pre, dict):
        raise ValueError(f"{path}: preprocess_cfg is not a JSON object.")
    size, mode = pre.get("size", vision.get("image_size", 224)), pre.get("resize_mode", "shortest")
    interpolation = pre.get("interpolation", "bicubic")
    side = size[0] if isinstance(size, (list, tuple)) and len(size) == 2 and size[0] == size[1] else size
    clip = preprocessing_of("clip")
    mean, std = _rgb(pre.get("mean", clip.mean)), _rgb(pre.get("std", clip.std))
    if mean is None or std is None or min(std) <= 0:
        raise ValueError(f"{path}: preprocess_cfg mean={pre.get('mean')!r}, std={pre.get('std')!r}; expected a number "
                         "or three (RGB) each, std > 0.")
    if interpolation not in RESAMPLE.values() or mode not in ("shortest", "squash") or not (
            isinstance(side, int) and not isinstance(side, bool) and side > 0):
        raise ValueError(f"{path}: preprocess_cfg size={size!r}, resize_mode={mode!r}, interpolation={interpolation!r}; "
                         "expected a square size, resize_mode 'shortest' or 'squash', interpolation bicubic or bilinear.")
    if mode == "squash":
        return ImageProcessing((side, side), None, None, interpolation, 1 / 255, mean, std)
    return ImageProcessing(None, side, side, interpolation, 1 / 255, mean, std)


def from_model(model):
    """Without `preprocessor_config.json`: a keras_vit image model's own preprocessing, its square input."""
    spec = preprocessing_of(model)
    side = int(model.inputs[0].shape[1])
    return ImageProcessing((side, side), None, None, spec.interpolation, 1 / 255, spec.mean, spec.std)


def load(image):
    """An image file's path -> its uint8 pixels; an array -> itself (RGB, 0-255, `(H, W, 3)`)."""
    if isinstance(image, (str, os.PathLike)):
        return image_ops.read_image(os.fspath(image))
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3 or not (np.issubdtype(array.dtype, np.number)):
        raise ValueError(f"an image of shape {array.shape} and dtype {array.dtype}: expected (height, width, 3) RGB "
                         "pixels in 0-255 (uint8 or float), or an image file's path.")
    return array


def resized(processing, pixels):
    """One image's resized (and cropped) 0-255 pixels, float32."""
    if processing.shortest_edge is not None:
        fraction = processing.crop / processing.shortest_edge
        return image_ops.center_crop(pixels, processing.crop, fraction, processing.interpolation)
    out = pixels.astype(np.float32)
    if processing.size is not None and tuple(pixels.shape[:2]) != processing.size:
        out = image_ops.resize(pixels, processing.size, processing.interpolation)
    if processing.crop is not None:
        top, left = ((side - processing.crop) // 2 for side in out.shape[:2])
        out = out[top: top + processing.crop, left: left + processing.crop]
    return out


def normalise(processing, pixels):
    """`(pixels * rescale - mean) / std`, float32."""
    mean, std = (np.asarray(v, np.float32) for v in (processing.mean, processing.std))
    return (np.asarray(pixels, np.float32) * np.float32(processing.rescale) - mean) / std
