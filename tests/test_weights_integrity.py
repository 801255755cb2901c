"""What is checked when a checkpoint is read (CRC-32 of npz members, Hugging Face shard names
and sizes, config.json's epsilon), and what the exporters never overwrite."""

import os
import struct
import zipfile

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import convert_checkpoint
from tests.weights_fixtures import TINY, original_npz_params

KERNEL = "Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"


@pytest.fixture
def params(rng):
    return original_npz_params(rng, **TINY, classes=5)


def corrupt_member(path, member):
    """Flips bytes in the middle of `member`'s stored data, as a bad disk or copy would."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member + ".npy")
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
        middle = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
        f.seek(middle)
        data = f.read(8)
        f.seek(middle)
        f.write(bytes(b ^ 0x5A for b in data))


def stacked(params):
    """The same weights in the scanned layout (blocks stacked on a leading axis)."""
    out = {k: v for k, v in params.items() if not k.startswith("Transformer/encoderblock_")}
    for key in [k for k in params if k.startswith("Transformer/encoderblock_0/")]:
        rest = key[len("Transformer/encoderblock_0/"):]
        out["Transformer/encoderblock/" + rest] = np.stack([params[f"Transformer/encoderblock_{i}/{rest}"] for i in range(2)])
    return out


@pytest.mark.parametrize("layout", ["stored", "compressed", "stacked"])
def test_corrupt_npz_member_fails_load_and_convert(params, tmp_path, layout):
    path = str(tmp_path / "ckpt.npz")
    member = KERNEL
    if layout == "stacked":
        params, member = stacked(params), "Transformer/encoderblock/MlpBlock_3/Dense_0/kernel"
    (np.savez_compressed if layout == "compressed" else np.savez)(path, **params)
    keras_vit.VisionTransformer(**TINY, classes=5, weights=path)  # intact: loads
    corrupt_member(path, member)
    message = rf"'{member}' in {path}: corrupt data"
    with pytest.raises(ValueError, match=message):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=path)
    out = tmp_path / "out.safetensors"
    with pytest.raises(ValueError, match=message):
        convert_checkpoint(path, out)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]
