"""keras_vit.data.images (NumPy, no TensorFlow) against the tf.data pipeline it stands in for:
`read_image` = `data.decode_image_file`, `resize` = `augment.resize`, `center_crop` =
`augment.eval_transform`, on files written here in every format and colour mode."""

import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.data import images
from keras_vit.data.imagenet import preprocess_input
from keras_vit.data import augment
from keras_vit.data.sources import decode_image_file

pytestmark = pytest.mark.backend_independent  # NumPy and TensorFlow image code: runs under one backend (tests/conftest.py)

RNG = np.random.default_rng(0)
# A non-square picture with smooth regions and noise, so that JPEG's DCT and chroma
# upsampling matter; RGBA for the modes that keep a fourth channel.
_Y, _X = np.mgrid[:37, :52]
PICTURE = np.stack([_X * 5, _Y * 7, (_X + _Y) * 3, 255 - _Y * 6], -1) % 256
PICTURE = np.clip(PICTURE + RNG.integers(-40, 40, PICTURE.shape), 0, 255).astype(np.uint8)


def _pil(mode, **save):
    """`(file name, bytes)` maker for a Pillow image of PICTURE in `mode`."""

    def make(name):
        rgba = Image.fromarray(PICTURE, "RGBA")
        image = {
            "RGBA": rgba, "RGB": rgba.convert("RGB"), "L": rgba.convert("L"), "LA": rgba.convert("LA"),
            "1": rgba.convert("1"), "P": rgba.convert("RGB").quantize(24), "CMYK": rgba.convert("CMYK"),
        }[mode]
        buffer = io.BytesIO()
        image.save(buffer, name.rsplit(".", 1)[1].upper().replace("JPG", "JPEG"), **save)
        return buffer.getvalue()

    return make


def _png16(channels):
    def make(name):
        return tf.io.encode_png(RNG.integers(0, 65536, (23, 31, channels)).astype(np.uint16)).numpy()

    return make


def _gif_frames(name):
    frames = [Image.fromarray(np.roll(PICTURE[..., :3], 9 * i, axis=1)).quantize(32) for i in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


FILES = {
    "grey.png": _pil("L"), "grey_alpha.png": _pil("LA"), "rgb.png": _pil("RGB"), "rgba.png": _pil("RGBA"),
    "palette.png": _pil("P"), "palette_transparent.png": _pil("P", transparency=3), "bits.png": _pil("1"),
    "grey16.png": _png16(1), "grey_alpha16.png": _png16(2), "rgb16.png": _png16(3), "rgba16.png": _png16(4),
    "420.jpg": _pil("RGB", quality=90), "422.jpg": _pil("RGB", quality=90, subsampling=1),
    "444.jpg": _pil("RGB", quality=97, subsampling=0), "progressive.jpg": _pil("RGB", progressive=True),
    "grey.jpg": _pil("L"),
    "palette.gif": _pil("P"), "transparent.gif": _pil("P", transparency=5), "animated.gif": _gif_frames,
    "rgb.bmp": _pil("RGB"), "rgba.bmp": _pil("RGBA"), "grey.bmp": _pil("L"),
}


def _write(folder, name, make=None):
    path = os.path.join(folder, name)
    with open(path, "wb") as handle:
        handle.write((make or FILES[name])(name))
    return path


def _tf_decode(path):
    return decode_image_file(tf.constant(path), 0)[0].numpy()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    for name in FILES:
        _write(str(folder), name)
    return str(folder)


@pytest.mark.parametrize("name", sorted(FILES))
def test_read_image_decodes_as_tensorflow(folder, name):
    path = os.path.join(folder, name)
    pixels = images.read_image(path)
    assert pixels.dtype == np.uint8 and pixels.shape[2] == 3
    np.testing.assert_array_equal(pixels, _tf_decode(path))


def test_a_photograph_decodes_and_crops_as_tensorflow():
    sklearn = pytest.importorskip("sklearn")  # ships two JPEG photographs (640 x 427)
    path = os.path.join(os.path.dirname(sklearn.__file__), "datasets", "images", "china.jpg")
    pixels = images.read_image(path)
    np.testing.assert_array_equal(pixels, _tf_decode(path))
    expected = augment.scale_to_unit(augment.eval_transform(tf.constant(pixels), 224, 0.875)).numpy()
    np.testing.assert_allclose(preprocess_input(images.center_crop(pixels, 224, 0.875)), expected, rtol=0, atol=1e-5)


def test_cmyk_jpeg_is_within_two_levels(tmp_path):
    """libjpeg-turbo's CMYK -> RGB (simplejpeg) rounds otherwise than TensorFlow's own."""
    path = _write(str(tmp_path), "cmyk.jpg", _pil("CMYK"))
    difference = np.abs(images.read_image(path).astype(int) - _tf_decode(path))
    assert difference.max() <= 2


@pytest.mark.parametrize(
    "shape, size",
    [
        ((37, 52), (16, 16)), ((37, 52), (8, 30)), ((37, 52), (111, 53)), ((37, 52), (37, 52)),
        ((5, 300), (224, 224)), ((300, 5), (1, 1)), ((1, 9), (4, 3)), ((333, 250), (667, 750)),
    ],
)
def test_resize_is_tensorflows_antialiased_bilinear(shape, size):
    image = RNG.integers(0, 256, (*shape, 3)).astype(np.uint8)
    expected = augment.resize(tf.constant(image), size).numpy()
    np.testing.assert_allclose(images.resize(image, size) / 127.5, expected / 127.5, rtol=0, atol=1e-5)


@pytest.mark.parametrize("shape", [(37, 52), (52, 37), (16, 16), (8, 5), (500, 41), (32, 45)])  # 45 / 2: a tie
@pytest.mark.parametrize("size, crop_fraction", [(16, 1.0), (32, 0.875), (24, 0.9), (224, 1.0)])
def test_center_crop_is_the_eval_transform(shape, size, crop_fraction):
    image = RNG.integers(0, 256, (*shape, 3)).astype(np.uint8)
    expected = augment.scale_to_unit(augment.eval_transform(tf.constant(image), size, crop_fraction)).numpy()
    crop = preprocess_input(images.center_crop(image, size, crop_fraction))
    assert crop.shape == expected.shape == (size, size, 3) and crop.dtype == np.float32
    np.testing.assert_allclose(crop, expected, rtol=0, atol=1e-5)


def test_unreadable_files_are_named(folder, tmp_path):
    with pytest.raises(FileNotFoundError, match="No image file .*missing.png"):
        images.read_image(str(tmp_path / "missing.png"))
    bad = {"text.png": b"not an image"}
    for name in ("rgb.png", "420.jpg", "palette.gif"):
        with open(os.path.join(folder, name), "rb") as handle:
            bad["truncated_" + name] = handle.read()[:300]
    buffer = io.BytesIO()
    Image.fromarray(PICTURE[..., :3]).save(buffer, "TIFF")  # Pillow reads it, TensorFlow does not
    bad["picture.tif"] = buffer.getvalue()
    for name, data in bad.items():
        path = _write(str(tmp_path), name, lambda _, data=data: data)
        with pytest.raises(ValueError, match=f"{name} is not a readable JPEG, PNG, GIF or BMP image"):
            images.read_image(path)


@pytest.mark.parametrize("shape, size", [((37, 53), (16, 20)), ((20, 24), (45, 31)), ((30, 30), (29, 7))])
def test_bicubic_resize_is_pillows(shape, size):
    """Pillow's antialiased bicubic (a = -0.5), as timm and transformers resize for DeiT,
    DINOv2 and SigLIP; within float32 rounding of 0-255 values."""
    image = np.random.default_rng(0).uniform(0, 255, shape).astype(np.float32)
    expected = np.asarray(Image.fromarray(image, mode="F").resize(size[::-1], Image.BICUBIC))
    np.testing.assert_allclose(images.resize(image[..., None], size, "bicubic")[..., 0], expected, atol=2e-3)


def test_a_tiny_eval_crop_computes_only_the_window(rng):
    """`eval_crop` 1e-5 (inside its range (0, 1]) scales a 40x40 image to 1.6M^2 pixels: only
    the central square is computed, by the tf.data pipeline as by NumPy."""
    image = rng.integers(0, 256, (40, 40, 3)).astype("uint8")
    window = augment.eval_transform(tf.constant(image), 16, 1e-5).numpy()
    np.testing.assert_allclose(window, images.center_crop(image, 16, 1e-5), rtol=0, atol=1e-2)
