"""`keras-vit predict` of a dense model: per image file, the class map (semantic, EoMT) or the depth
map at the image's own size, and how they are written: a colour-coded PNG per image (a fixed
palette, class 0 first, the class id as the pixel's palette index), a normalised 8- or 16-bit
depth PNG or a 16-bit one of depth x a scale, or the raw maps (`.npy` / `.npz`, JSON).

Each image goes through the model whole: resized (the preprocessing's interpolation) to the
model's input size, or for a model of any size so that its shorter side is the model's position
grid (aspect ratio kept, both sides rounded to multiples of the patch size), scaled by the model's
preprocessing; the output is resized back to the image's size (bilinear, as torch's `interpolate`
with `align_corners=False`): per-pixel logits before their argmax, EoMT's class scores as
`post_process_semantic_segmentation` does, depth as it is."""

import os

import numpy as np

from keras_vit.data import images
from keras_vit.dense.eomt_postprocess import post_process_semantic_segmentation, resize_maps
from keras_vit.data.imagenet import preprocess_input
from keras_vit.inspect.model_parts import dense_task, input_step, position_layer, vit_part
from keras_vit.preprocessing import preprocessing

DEPTH_BITS = (8, 16)
RAW_SUFFIXES = (".npy", ".npz")


def palette():
    """The fixed 256-colour palette `(256, 3)` uint8: class 0 black, then the bits of each class
    id spread over the high bits of red, green and blue (distinct colours, PASCAL VOC's)."""
    colours = np.zeros((256, 3), np.uint8)
    for index in range(256):
        value, shift = index, 7
        while value:
            for channel in range(3):
                colours[index, channel] |= ((value >> channel) & 1) << shift
            value, shift = value >> 3, shift - 1
    return colours


def input_size(model, height, width):
    """The `(height, width)` an image of that size is given to `model` at (module docstring)."""
    fixed = model.inputs[0].shape[1:3]
    if None not in fixed:
        return tuple(fixed)
    step = input_step(model)
    side = min(position_layer(vit_part(model)).grid_size) * step
    scale = side / min(height, width)
    return tuple(max(step, int(round(n * scale / step)) * step) for n in (height, width))


def predict_maps(model, paths):
    """One map per image file at its own size: int32 class ids (semantic, EoMT) or float32 depth."""
    task = dense_task(model)
    if task is None:
        raise ValueError(f"{model.name} is not a dense model (keras_vit.DenseModel, EoMT).")
    decoded = [images.read_image(path) for path in paths]  # every file read before anything is run or written
    interpolation = preprocessing(model).interpolation
    model.check_inputs = False  # scaled here by its own preprocessing: nothing for the input-range guard to see
    maps = []
    for pixels in decoded:
        size = input_size(model, *pixels.shape[:2])
        x = preprocess_input(images.resize(pixels, size, interpolation)[None], preprocessing=model)
        out = model.predict(x, verbose=0)
        if task == "eomt":
            maps.append(post_process_semantic_segmentation(out, [pixels.shape[:2]], size=size)[0].astype(np.int32))
        elif task == "semantic":  # (1, h, w, classes) -> (classes, H, W)
            logits = resize_maps(np.moveaxis(np.asarray(out, np.float32)[0], -1, 0), pixels.shape[:2])
            maps.append(np.argmax(logits, axis=0).astype(np.int32))
        else:
            maps.append(resize_maps(np.asarray(out, np.float32), pixels.shape[:2])[0])
    return task, maps


def depth_png(depth, bits=16, scale=None):
    """`depth` as `bits`-bit grey levels: scaled to their full range (its minimum 0, its maximum the
    top), or with `scale` (16 bits) the depth x `scale`, rounded and clipped to 0 ... 65535 (as
    KITTI's x 256 and NYU's millimetres x 1000 store it; `keras_vit.dense.data` reads it back)."""
    if bits not in DEPTH_BITS:
        raise ValueError(f"bits={bits!r}; expected one of {DEPTH_BITS}.")
    if scale is not None:
        if bits != 16:
            raise ValueError(f"A depth scale writes 16-bit PNGs (8-bit grey PNGs are read as masks), not bits={bits}.")
        return np.round(np.clip(depth * np.float64(scale), 0, 2**16 - 1)).astype(np.uint16)
    low, high = float(depth.min()), float(depth.max())
    scaled = (depth - low) / (high - low) if high > low else np.zeros_like(depth)
    top = 2**bits - 1
    return np.round(scaled * top).astype(np.uint8 if bits == 8 else np.uint16)


def png_names(paths, out_dir):
    """`out_dir/STEM.png` per image; two images of the same stem are refused."""
    names = [os.path.join(out_dir, os.path.splitext(os.path.basename(p))[0] + ".png") for p in paths]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"Two images would write {twice[0]}; give images of different names.")
    return names


def write_png(path, value, task):
    """A class map as a palette PNG (ids as palette indices, up to 256 classes), or a depth PNG."""
    from PIL import Image

    from keras_vit.utils.files import atomic_path

    if task == "depth":
        image = Image.fromarray(value)
    else:
        if value.max(initial=0) > 255:
            raise ValueError(f"{path}: class ids up to {value.max()}; a palette PNG holds 256 classes (use --output .npz).")
        image = Image.fromarray(value.astype(np.uint8), mode="P")
        image.putpalette(palette().reshape(-1).tolist())
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG")


def save_raw(path, paths, maps):
    """The maps as `.npz` (one array per image, by file name) or `.npy` (one array: images of one size stacked)."""
    from keras_vit.utils.files import atomic_path

    if not path.endswith(RAW_SUFFIXES):
        raise ValueError(f"--output {path}: expected a name ending in {' or '.join(RAW_SUFFIXES)}.")
    if path.endswith(".npy") and len({m.shape for m in maps}) > 1:
        raise ValueError(f"--output {path}: the images have different sizes; a .npy holds one array (use .npz).")
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            if path.endswith(".npy"):
                np.save(f, np.stack(maps))
            else:
                np.savez(f, **{p: m for p, m in zip(paths, maps)})
