"""Image files to model inputs in NumPy (Pillow and simplejpeg decode), without TensorFlow.

The same operations as the `tf.data` input pipeline, for `keras-vit predict` and `inspect`
(`tests/test_images.py` checks them equal):

- `read_image` = `keras_vit.data.sources.decode_image_file` (`tf.io.decode_image(...,
  channels=3)`): identical pixels for PNG (grey repeated, alpha dropped, palettes expanded,
  16 bits cut to their high byte), BMP, GIF (first frame, transparent pixels black) and RGB or
  grey JPEG (TensorFlow's IFAST DCT with fancy upsampling); CMYK JPEGs are within 2 levels
  (libjpeg-turbo's CMYK -> RGB rounding).
- `center_crop` = `keras_vit.data.augment.eval_transform`, and `resize` =
  `augment.resize` (`tf.image.resize(..., "bilinear", antialias=True)`), within float32
  rounding. `interpolation="bicubic"` (DeiT's, DINOv2's and SigLIP's preprocessing) is
  Pillow's antialiased bicubic (Keys' cubic, a = -0.5), as timm and transformers resize.
"""

import os

import numpy as np
import simplejpeg
from PIL import Image

from keras_vit.utils.files import regular_file

FORMATS = ("JPEG", "PNG", "GIF", "BMP")


def read_image(path):
    """The image file at `path` as a uint8 `(height, width, 3)` RGB array.

    Raises FileNotFoundError for a missing file, ValueError for one that is not a complete
    JPEG, PNG, GIF or BMP image.
    """
    if not os.path.lexists(path):
        raise FileNotFoundError(f"No image file {path}.")
    regular_file(path, "as an image")  # a FIFO would block
    try:
        with Image.open(path, formats=FORMATS) as image:
            if image.format == "JPEG":
                with open(path, "rb") as handle:
                    return simplejpeg.decode_jpeg(handle.read(), colorspace="RGB", fastdct=True, fastupsample=False)
            return _to_rgb(image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise ValueError(f"{path} is not a readable JPEG, PNG, GIF or BMP image ({error}).") from None


def _to_rgb(image):
    """A decoded Pillow image (not JPEG) as libpng / TensorFlow's GIF decoder give it."""
    if image.mode == "I" or image.mode.startswith("I;16"):  # 16-bit grey: the high byte (libpng strip_16)
        grey = (np.asarray(image).astype(np.uint32) >> 8).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    if image.format == "GIF":  # TensorFlow leaves transparent pixels black
        rgba = np.asarray(image.convert("RGBA"))
        return np.where(rgba[..., 3:] == 0, 0, rgba[..., :3]).astype(np.uint8)
    return np.asarray(image.convert("RGB"))


def _triangle(t):
    return np.maximum(np.float32(0), np.float32(1) - t)


def _keys_cubic(t, a=np.float32(-0.5)):
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t < 1, near, np.where(t < 2, far, np.float32(0))).astype(np.float32)


# Interpolation -> (kernel of |distance|, its radius), distances in input pixels at scale 1.
KERNELS = {"bilinear": (_triangle, 1), "bicubic": (_keys_cubic, 2)}


def _resize_weights(in_size, out_size, start, count, interpolation="bilinear"):
    """`(index, weights)`, each `(count, taps)`: for output pixels `start .. start + count - 1`
    of a resize antialiased when shrinking, the input pixels under each one's kernel and their
    weights: the kernel (`KERNELS`) at the output pixel's centre, widened by the shrink factor,
    normalised (bilinear: TensorFlow's `scale_and_translate` with the "triangle" kernel,
    `jax.image.resize(..., "linear", antialias=True)`). Only the kernel's support is computed,
    so the work follows the output asked for, not the whole resized image."""
    f32 = np.float32
    kernel, radius = KERNELS[interpolation]
    inv_scale = f32(1) / (f32(out_size) / f32(in_size))  # float32 throughout, as TensorFlow
    width = max(inv_scale, f32(1))  # the kernel's stretch, in input pixels
    one_over_width = f32(1) / width
    # output pixel `start + i` of the whole resize, as `scale_and_translate` shifted by `-start` places it
    centres = (np.arange(count, dtype=f32) + f32(0.5)) * inv_scale + inv_scale * f32(start)
    first = np.maximum(np.floor(centres - radius * width).astype(np.int64) - 2, 0)
    index = first[:, None] + np.arange(int(np.ceil(2 * radius * width)) + 4)
    offsets = index.astype(f32) + f32(0.5) - centres[:, None]
    weights = kernel(np.abs(offsets * one_over_width))
    weights[index >= in_size] = 0
    return np.minimum(index, in_size - 1), weights * (f32(1) / weights.sum(axis=1, keepdims=True))


def resize(image, size, interpolation="bilinear"):
    """`(height, width, channels)` image -> `size = (height, width)`, bilinear or bicubic,
    antialiased when shrinking; float32 (bicubic can overshoot the input's range a little)."""
    return _resize_window(image, size, (0, 0), interpolation=interpolation)


def _resize_window(image, size, corner, window=None, interpolation="bilinear"):
    """The `window = (rows, columns)` of `image` resized to `size` whose top-left pixel is
    `corner` (default: all of it), computed without the rest of the resized image."""
    window = window or (size[0] - corner[0], size[1] - corner[1])
    rows = _resize_first_axis(np.asarray(image), size[0], corner[0], window[0], interpolation)
    return _resize_first_axis(rows.swapaxes(0, 1), size[1], corner[1], window[1], interpolation).swapaxes(0, 1)


def _resize_first_axis(image, out_size, start, count, interpolation):
    """Output rows `start .. start + count - 1`: each the weighted sum of the few input rows
    under its kernel (cast to float32 a row at a time)."""
    index, weights = _resize_weights(len(image), out_size, start, count, interpolation)
    out = np.zeros((count, *image.shape[1:]), np.float32)
    for k in range(index.shape[1]):
        out += weights[:, k, None, None] * image[index[:, k]].astype(np.float32)
    return out


# Longer side / shorter side beyond which an image is refused rather than centre-cropped.
MAX_ASPECT_RATIO = 100


def center_crop(image, size, crop_fraction=1.0, interpolation="bilinear"):
    """Resize (`interpolation`: "bilinear" or "bicubic") the shorter side to `size /
    crop_fraction`, then take the central `size` square; float32 pixels. Only that square is computed. An image more than
    `MAX_ASPECT_RATIO` times longer than wide (or the reverse) is refused (ValueError)."""
    height, width = image.shape[:2]
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise ValueError(
            f"a {width}x{height} image: its sides differ more than {MAX_ASPECT_RATIO} times, so a centre "
            "crop would keep almost none of it; crop or pad it to a less extreme aspect ratio."
        )
    shape = np.asarray(image.shape[:2], np.float32)
    scale = np.float32(size / crop_fraction) / shape.min()  # float32, as the tf.data graph
    scaled = np.maximum(np.round(shape * scale).astype(np.int32), size)
    top, left = (scaled - size) // 2
    return _resize_window(image, tuple(scaled), (top, left), (size, size), interpolation)
