"""One validation layer for every reader (issue 35 part 3): family tensors of the wrong shape
or dtype, `.keras` configurations declaring huge models and files declaring huge tensors are
refused in one line (exit 2 from the command line), before anything is allocated or written.
File handling is the same on every backend, so these run on one."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import h5py
import numpy as np
import pytest

from keras_vit.weights import formats, read_checkpoint
from keras_vit.weights.canonical import ATTN, LAYER_SCALE, MAP, MAP_KEYS, POSEMB
from keras_vit.weights.lazy import LazyArray
from tests.support import BACKEND
from tests.support.checkpoints import TINY, original_npz_params
from tests.support.commands import fails

pytestmark = pytest.mark.skipif(BACKEND != "torch", reason="file handling, the same on every backend")

GIB = 2**30
D, HEADS, MLP = TINY["hidden_dim"], TINY["num_heads"], TINY["mlp_dim"]


def family_params(family, rng):
    """Canonical tensors of a tiny DeiT (distilled), DINOv2 (registers, LayerScale) or SigLIP
    (MAP head, no class token) checkpoint."""
    params = original_npz_params(rng)
    if family == "deit":
        params["dist"] = rng.standard_normal((1, 1, D)).astype(np.float32)
        params[POSEMB] = rng.standard_normal((1, 2 + 16, D)).astype(np.float32)
        params["head_dist/kernel"], params["head_dist/bias"] = np.zeros((D, 5), np.float32), np.zeros(5, np.float32)
    elif family == "dinov2":  # a backbone, as transformers' Dinov2Model
        del params["head/kernel"], params["head/bias"]
        params["reg"] = rng.standard_normal((1, 4, D)).astype(np.float32)
        for i in range(TINY["depth"]):
            for key in LAYER_SCALE:
                params[key.format(i=i)] = np.full(D, 1e-5, np.float32)
    else:
        del params["cls"], params["head/kernel"], params["head/bias"]
        params[POSEMB] = rng.standard_normal((1, 16, D)).astype(np.float32)
        shapes = {"probe": (1, 1, D), "out/kernel": (HEADS, D // HEADS, D), "out/bias": (D,), "LayerNorm_0": (D,),
                  "Dense_0/kernel": (D, MLP), "Dense_0/bias": (MLP,), "Dense_1/kernel": (MLP, D), "Dense_1/bias": (D,),
                  "kernel": (D, HEADS, D // HEADS), "bias": (HEADS, D // HEADS)}  # the most specific first
        for key in MAP_KEYS:
            shape = next(shape for end, shape in shapes.items() if key.endswith(end) or end + "/" in key)
            params[key] = rng.standard_normal(shape).astype(np.float32)
    return params


# (family, canonical key, the value it gets): each refused, whatever file it comes in.
WRONG = {
    "registers": ("dinov2", "reg", np.zeros((1, 4, D - 1), np.float32)),
    "layer scale": ("dinov2", LAYER_SCALE[1].format(i=1), np.ones(D - 1, np.float32)),
    "distillation token": ("deit", "dist", np.zeros((1, 2, D), np.float32)),
    "distillation head": ("deit", "head_dist/kernel", np.zeros((D, 6), np.float32)),
    "MAP probe": ("siglip", MAP + "probe", np.zeros((1, 1, D + 1), np.float32)),
    "MAP attention": ("siglip", MAP + "MultiHeadDotProductAttention_0/key/kernel", np.zeros((D, HEADS, 7), np.float32)),
    "MAP MLP": ("siglip", MAP + "MlpBlock_0/Dense_0/kernel", np.zeros((D, MLP + 1), np.float32)),
    "boolean patch kernel": ("dinov2", "embedding/kernel", np.ones((8, 8, 3, D), bool)),
    "complex patch kernel": ("deit", "embedding/kernel", np.ones((8, 8, 3, D), np.complex64)),
    "zero-size patch kernel": ("siglip", "embedding/kernel", np.ones((8, 8, 3, 0), np.float32)),
}
EXPECTED = {"distillation token": "'dist' has shape (1, 2, 32)"}


def write_source(reader, params, key, value, path):
    """The checkpoint of canonical `params` with `key` set to `value`, as `reader` reads it:
    an original `.npz`, a timm `.safetensors` or a transformers folder (the writers are given
    float32 of the right shape, then the file's tensor is replaced)."""
    from safetensors.numpy import load_file, save_file

    if reader == "npz":
        np.savez(path, **{**params, key: value})
        return path
    np.savez(path.with_suffix(".npz"), **params)
    ckpt = read_checkpoint(path.with_suffix(".npz"), num_heads=HEADS)
    fmt = formats.by_option({"timm": "timm", "hf": "hf"}[reader])
    if value.dtype == np.float32:
        ckpt.tensors[key] = LazyArray.wrap(value, "edited")
        fmt.write(str(path), ckpt)
        return path
    fmt.write(str(path), ckpt)
    file = path / "model.safetensors" if reader == "hf" else path
    tensors = load_file(file)
    name = next(name for name, t in tensors.items() if t.ndim == 4)  # the patch kernel, (width, 3, patch, patch)
    tensors[name] = np.ascontiguousarray(np.moveaxis(value, (0, 1, 2, 3), (2, 3, 1, 0)))
    try:
        save_file(tensors, file)
    except Exception as error:  # a dtype safetensors cannot store (complex): nothing to read
        pytest.skip(f"safetensors cannot store {value.dtype} ({error})")
    return path


@pytest.mark.parametrize("reader", ["npz", "timm", "hf"])
@pytest.mark.parametrize("case", WRONG)
def test_family_tensors_of_the_wrong_shape_or_dtype_are_never_converted(tmp_path, capsys, reader, case):
    """`convert` wrote family checkpoints whose registers, LayerScale, distillation token /
    head, MAP probe / attention / MLP had the wrong shape, or whose patch kernel was boolean,
    complex or empty (exit 0)."""
    family, key, value = WRONG[case]
    params = family_params(family, np.random.default_rng(0))
    source = write_source(reader, params, key, value, tmp_path / {"npz": "in.npz", "timm": "in.safetensors", "hf": "in"}[reader])
    for output in ("out.npz", "out.safetensors"):
        fits_dtype = value.dtype == np.float32 and value.size
        expected = EXPECTED.get(case, "has shape") if fits_dtype else "accepted: non-empty float16"
        # the canonical check speaks; a file whose layout cannot hold the value is refused by its reader
        fails(["convert", source, tmp_path / output, "--num-heads", HEADS], capsys, str(source),
              *([expected] if reader == "npz" else []))
        assert not (tmp_path / output).exists()


@pytest.mark.parametrize("family", ["deit", "dinov2", "siglip"])
def test_family_checkpoints_of_the_right_shapes_convert(tmp_path, family):
    """The families' fixtures above are right as they are: each converts."""
    from keras_vit.weights import convert_checkpoint

    np.savez(tmp_path / "in.npz", **family_params(family, np.random.default_rng(0)))
    convert_checkpoint(tmp_path / "in.npz", tmp_path / "out.npz")
    assert sorted(np.load(tmp_path / "out.npz").files) == sorted(np.load(tmp_path / "in.npz").files)
