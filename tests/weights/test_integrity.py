"""What is checked when a checkpoint is read (CRC-32 of npz members, Hugging Face shard names
and sizes, config.json's epsilon), and what the exporters never overwrite."""

import json
import os
import re
import shutil
import struct
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import convert_checkpoint
from tests.support.checkpoints import TINY, TINY_IMAGE, images, original_npz_params
from tests.support.commands import fails

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


# ------------------------------------------------------------------ Hugging Face folders


def hf_folder(folder, seed=0, **config):
    """A tiny transformers `ViTForImageClassification` saved with `save_pretrained`."""
    transformers = pytest.importorskip("transformers")
    from tests.support.checkpoints import randomize_hf_model

    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=TINY_IMAGE, patch_size=8, num_labels=5, hidden_act="gelu", **config,
    )
    randomize_hf_model(transformers.ViTForImageClassification(config).eval(), seed).save_pretrained(folder)
    return folder


def hf_logits(folder, x):
    import torch
    import transformers

    model = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """A Hugging Face folder whose weights are one shard named in model.safetensors.index.json."""
    folder = hf_folder(tmp_path_factory.mktemp("sharded"), layer_norm_eps=1e-6)
    os.rename(folder / "model.safetensors", folder / "model-00001-of-00001.safetensors")
    return folder


def with_shard(folder, tmp_path, shard):
    """A copy of `folder` whose index names `shard` for every tensor."""
    from safetensors import safe_open

    copy = tmp_path / "hf"
    shutil.copytree(folder, copy)
    with safe_open(str(folder / "model-00001-of-00001.safetensors"), "np") as f:
        names = list(f.keys())
    index = {"metadata": {}, "weight_map": {name: shard for name in names}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    return copy


def test_sharded_folder_loads(sharded, tmp_path, rng):
    folder = with_shard(sharded, tmp_path, "model-00001-of-00001.safetensors")
    x = images(rng)
    model = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(folder))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), hf_logits(folder, x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE", "sub/model.safetensors", "..",
                                   ["model-00001-of-00001.safetensors"], {"file": "model-00001-of-00001.safetensors"},
                                   3, None])
def test_shard_names_must_be_plain_file_names(sharded, tmp_path, capsys, shard):
    """A weight_map value that is a path, or not a string at all (a list or an object was a TypeError)."""
    outside = tmp_path / "outside.safetensors"
    shutil.copy(sharded / "model-00001-of-00001.safetensors", outside)
    shard = str(outside) if shard == "ABSOLUTE" else shard
    folder = with_shard(sharded, tmp_path, shard)
    os.makedirs(folder / "sub")
    shutil.copy(outside, folder / "sub" / "model.safetensors")
    expected = f"shard {shard!r} is not a plain file name in {folder}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=str(folder))
    fails(["convert", folder, tmp_path / "out.npz"], capsys, expected, "must name a file in the index's folder")


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "folder", "link_loop"])
def test_shard_that_is_not_a_regular_file_is_refused_at_once(sharded, tmp_path, kind):
    folder = with_shard(sharded, tmp_path, "model-00002.safetensors")
    target = folder / "model-00002.safetensors"
    if kind == "dev_zero":
        os.symlink("/dev/zero", target)
    elif kind == "fifo":
        os.mkfifo(target)  # opening it would block until a writer comes
    elif kind == "link_loop":
        os.symlink(target.name, target)
    else:
        os.mkdir(target)
    with pytest.raises(ValueError, match=r"model-00002.safetensors is (not a regular file but|a symbolic link loop).*"
                                         r"refusing to read it as a shard named by"):
        convert_checkpoint(str(folder), tmp_path / "out.npz")
    assert not os.path.exists(tmp_path / "out.npz")


def test_shard_shorter_than_its_header_says_is_refused(sharded, tmp_path):
    folder = with_shard(sharded, tmp_path, "model-00001-of-00001.safetensors")
    shard = folder / "model-00001-of-00001.safetensors"
    os.truncate(shard, os.path.getsize(shard) - 100)
    with pytest.raises(ValueError, match=rf"{shard}: truncated or corrupt safetensors file"):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=str(folder))


def test_layer_norm_eps_of_the_config_is_honoured(tmp_path, rng):
    folder = hf_folder(tmp_path / "hf", seed=3, layer_norm_eps=0.5)
    x = images(rng)
    reference = hf_logits(folder, x)
    model = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(folder))
    assert model.get_layer("encoder").blocks[0].layer_norm_epsilon == 0.5
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), reference, atol=2e-6, rtol=0)
    keras_vit.weights.export(model, tmp_path / "back", format="hf")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["layer_norm_eps"] == 0.5
    np.testing.assert_allclose(hf_logits(tmp_path / "back", x), reference, atol=2e-6, rtol=0)
    model.save(tmp_path / "m.keras")  # the epsilon travels with a .keras file too
    reloaded = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(tmp_path / "m.keras"))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(reloaded(x)), reference, atol=2e-6, rtol=0)
    explicit = keras_vit.VisionTransformer(
        **TINY, classes=5, classifier_activation=None, layer_norm_epsilon=1e-6, weights=str(folder)
    )
    assert explicit.get_layer("encoder").blocks[0].layer_norm_epsilon == 1e-6
