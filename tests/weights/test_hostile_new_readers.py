"""Hostile or damaged files of the newest readers (issue 45): DINOv2's linear segmentation head
files, Perception Encoder core and EVA-CLIP OpenCLIP folders (`visual.trunk.`), OpenCLIP's
`timm/ViT-*-SigLIP*` folders (`open_clip_config.json`, weights, tokenizer files) and
tensorflow-datasets split and builder names: one line (exit 2 from the command line), never a
traceback, a hang or a file written. File handling is the same on every backend, so these run on one."""

import json
import os
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.text import image_processing
from keras_vit.text.image_text import ImageTextModel
from keras_vit.weights.containers import read_safetensors, write_safetensors
from tests.support.commands import fails, run_limited
from tests.support.dense import head_state, write_head
from tests.support.text import open_clip_siglip_folder, timm_clip_folder

pytestmark = pytest.mark.backend_independent  # file handling: runs under one backend (tests/conftest.py)

WEIGHTS, CONFIG, TRUNK = "open_clip_model.safetensors", "open_clip_config.json", "visual.trunk."


# ------------------------------------------------------------------ OpenCLIP folders: PE-core, EVA-CLIP, SigLIP


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """OpenCLIP hub folders with random weights: PE-core and EVA-CLIP (timm towers with CLIP's
    tokenizer), SigLIP (`timm/ViT-B-16-SigLIP`'s layout, T5 tokenizer)."""
    pytest.importorskip("transformers")
    out = {}
    for family in ("pe", "eva", "siglip"):
        out[family] = str(tmp_path_factory.mktemp(family))
        if family == "siglip":
            open_clip_siglip_folder(out[family])
        else:
            timm_clip_folder(out[family], np.random.default_rng(0), family)
    return out


def copy_of(folders, family, tmp_path, config=None, tensors=None):
    """A copy of a family's folder (its weights linked) with `config(json)` written as its
    `open_clip_config.json` and `tensors(dict)` as its weights."""
    folder = tmp_path / family
    shutil.copytree(folders[family], folder, symlinks=True, ignore=shutil.ignore_patterns(WEIGHTS))
    source = os.path.join(folders[family], WEIGHTS)
    if tensors is None:
        os.symlink(source, folder / WEIGHTS)
    else:
        write_safetensors(str(folder / WEIGHTS), tensors({k: v.load() for k, v in read_safetensors(source)[0].items()}))
    if config is not None:
        path = folder / CONFIG
        path.write_text(json.dumps(config(json.loads(path.read_text()))))
    return folder


def vision(**changes):
    return lambda c: {**c, "model_cfg": {**c["model_cfg"], "vision_cfg": {**c["model_cfg"]["vision_cfg"], **changes}}}


@pytest.mark.parametrize("family, config, expected", [
    ("pe", vision(timm_model_kwargs=[2]), "model_cfg / vision_cfg / timm_model_kwargs is not a JSON object"),
    ("eva", vision(timm_model_kwargs={"num_heads": "two"}), "num_heads='two'; expected a whole number >= 1"),
    ("siglip", vision(timm_pool=["map"]), "timm_pool=['map']"),
    ("siglip", vision(timm_proj={}), "timm_proj={}"),
    ("siglip", lambda c: {**c, "preprocess_cfg": [0.5]}, "preprocess_cfg is not a JSON object"),
    ("pe", lambda c: [c], "open_clip_config.json: expected a JSON object"),
    ("eva", vision(timm_pool="avg"), "timm_pool='avg'"),
])
def test_open_clip_config_of_wrong_types_is_refused_in_one_line(folders, tmp_path, capsys, family, config, expected):
    """`timm_model_kwargs` as a list, `timm_pool` as a list and `preprocess_cfg` as a list raised
    AttributeError / TypeError; `num_heads` of another type was ignored (then "the file does not
    record its attention head count") and `timm_proj: {}` read as "none"."""
    folder = copy_of(folders, family, tmp_path, config=config)
    fails(["convert", folder, tmp_path / "out.safetensors"], capsys, f"{folder}", expected)
    assert not (tmp_path / "out.safetensors").exists()


def test_a_fifo_folder_or_loop_named_open_clip_config_json_is_named_not_skipped(folders, tmp_path):
    """Such an `open_clip_config.json` was skipped as absent: the folder was then refused for
    another reason ("the file does not record its attention head count", "text config
    num_heads=0"), or read with the defaults."""
    made = []
    for family, kind in (("pe", "FIFO (named pipe)"), ("eva", "symbolic link loop"), ("siglip", "folder")):
        folder = copy_of(folders, family, tmp_path)
        path = folder / CONFIG
        path.unlink()
        if kind == "folder":
            path.mkdir()
        elif kind.startswith("FIFO"):
            os.mkfifo(path)
        else:
            path.symlink_to(path)
        made.append((folder, kind))
    done = run_limited([["convert", folder, tmp_path / f"{folder.name}.npz"] for folder, _ in made], timeout=90)
    assert done.stdout.split() == ["rc", "2"] * 3 and "Traceback" not in done.stderr, done.stdout + done.stderr
    for (folder, kind), line in zip(made, done.stderr.splitlines()):
        assert f"{folder / CONFIG} is not a regular file but a {kind}" in line, done.stderr
    assert not any(name.endswith(".npz") for name in os.listdir(tmp_path))


def test_a_tokenizer_file_that_is_a_symlink_loop_is_named(folders, tmp_path):
    folder = copy_of(folders, "siglip", tmp_path)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to(folder / "tokenizer.json")
    with pytest.raises(ValueError, match="tokenizer.json is not a regular file but a symbolic link loop") as error:
        ImageTextModel.from_checkpoint(str(folder))
    assert "\n" not in str(error.value)


def _set(key, value):
    return lambda t: {**t, key: value}


@pytest.mark.parametrize("family, tensors, expected", [
    ("pe", _set(TRUNK + "pos_embed", np.zeros(32, np.float32)), "pos_embed of shape (32,); PE-core's is (1, 1 + patches"),
    ("pe", _set(TRUNK + "head.weight", np.zeros(24, np.float32)), "head.weight' in"),
    ("eva", lambda t: {**t, TRUNK + "blocks.0.attn.q_proj.weight": t[TRUNK + "blocks.0.attn.q_proj.weight"].astype(np.int64)},
     "is int64"),
    ("eva", _set(TRUNK + "pos_embed", np.zeros(32, np.float32)), "position embeddings of shape (32,)"),
    ("siglip", lambda t: {**t, TRUNK + "attn_pool.latent": t[TRUNK + "attn_pool.latent"].astype(np.int32)}, "is int32"),
    ("siglip", lambda t: {k: v for k, v in t.items() if k != TRUNK + "blocks.1.mlp.fc2.weight"},
     "missing keys: 'blocks.1.mlp.fc2.weight'"),
])
def test_tensors_of_the_wrong_rank_or_dtype_are_refused_in_one_line(folders, tmp_path, capsys, family, tensors, expected):
    """A position table or image projection of the wrong rank raised IndexError; EVA-CLIP's
    integer `q_proj`, joined with float `k_proj` / `v_proj`, was promoted to float and read."""
    folder = copy_of(folders, family, tmp_path, tensors=tensors)
    fails(["convert", folder, tmp_path / "out.safetensors"], capsys, expected)
    assert not (tmp_path / "out.safetensors").exists()


def test_a_block_unlike_the_others_is_one_line_from_from_checkpoint(folders, tmp_path):
    """EVA-CLIP's block 0 without its attention's inner norm: the model was refused over four lines."""
    norm = TRUNK + "blocks.0.attn.norm."
    folder = copy_of(folders, "eva", tmp_path, tensors=lambda t: {k: v for k, v in t.items() if not k.startswith(norm)})
    with pytest.raises(ValueError, match="does not fit the model: .*out_norm") as error:
        keras_vit.from_checkpoint(str(folder))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("preprocess, expected", [
    ({"mean": 5}, (5.0, 5.0, 5.0)),  # one number for the three channels, as OpenCLIP's image_transform takes
    ({"mean": "abc"}, "mean='abc'"),
    ({"mean": [0.5, 0.5]}, "mean=[0.5, 0.5]"),
    ({"std": [0, 1, 1]}, "std=[0, 1, 1]"),
    ([0.5], "preprocess_cfg is not a JSON object"),
])
def test_open_clip_preprocess_cfg_mean_and_std(preprocess, expected):
    """A number as the mean raised TypeError, a string was read as three "channels", a list
    `preprocess_cfg` was ignored."""
    config = {"model_cfg": {"vision_cfg": {"image_size": 32}}, "preprocess_cfg": preprocess}
    if isinstance(expected, tuple):
        assert image_processing.from_open_clip_config(config).mean == expected
        return
    with pytest.raises(ValueError, match="open_clip_config.json: preprocess_cfg") as error:
        image_processing.from_open_clip_config(config)
    assert expected in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------ DINOv2 linear segmentation heads


@pytest.fixture(scope="module")
def backbone():
    return keras_vit.DINOv2S14(hidden_dim=16, depth=2, num_heads=2, mlp_dim=32, input_shape=(None, None, 3),
                               include_top=False, pooling=None, weights=None)


def _head(tmp_path, kind):
    torch = pytest.importorskip("torch")
    path = tmp_path / "head.pth"
    state = head_state(16, 3)
    if kind in ("int64", "bool", "complex64"):
        key = {"int64": "decode_head.conv_seg.weight", "bool": "decode_head.bn.running_var",
               "complex64": "decode_head.bn.weight"}[kind]
        state[key] = state[key].to(getattr(torch, kind))
    write_head(path, state)
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[:-40])
    elif kind in ("fifo", "loop", "folder"):
        path.unlink()
        {"fifo": os.mkfifo, "loop": lambda p: os.symlink(p, p), "folder": os.mkdir}[kind](path)
    return path


@pytest.mark.parametrize("kind, args, expected", [
    ("int64", {}, "decode_head.conv_seg.weight is int64; accepted: float16, bfloat16, float32 or float64"),
    ("bool", {}, "decode_head.bn.running_var is bool"),
    ("complex64", {}, "decode_head.bn.weight is complex64"),
    ("loop", {}, "is not a regular file but a symbolic link loop"),
    ("ok", {"num_classes": "3"}, "predicts 3 classes, not num_classes='3'"),
    ("empty", {}, "unrecognised checkpoint format"),
    ("truncated", {}, "corrupt or truncated zip archive"),
    ("fifo", {}, "is not a regular file but a FIFO (named pipe)"),
    ("folder", {}, "is a folder without weights"),
])
def test_head_files_damaged_or_of_other_dtypes_are_refused_in_one_line(backbone, tmp_path, kind, args, expected):
    """Integer, boolean and complex head tensors were assigned (cast, the imaginary part dropped);
    a symlink loop was "not a DINOv2 linear segmentation head file"."""
    path = _head(tmp_path, kind)
    with pytest.raises(ValueError) as error:
        keras_vit.from_checkpoint(str(path), backbone=backbone, **args)
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)


# ------------------------------------------------------------------ tensorflow-datasets names


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    """tensorflow-datasets' `dummy_mnist` (train 20, test 20 examples) prepared offline."""
    testing = pytest.importorskip("tensorflow_datasets.testing")
    folder = str(tmp_path_factory.mktemp("tfds"))
    testing.DummyMnist(data_dir=folder).download_and_prepare()
    return folder


@pytest.mark.parametrize("name, splits, expected", [
    ("dummy_mnist", {"train_split": "train[abc%]"}, "Split 'train[abc%]' of 'dummy_mnist': Error parsing split"),
    ("dummy_mnist", {"train_split": "train[5:2]"}, "Split 'train[5:2]' of 'dummy_mnist' holds no examples"),
    ("dummy_mnist", {"val_split": "train[:0%]"}, "Split 'train[:0%]' of 'dummy_mnist' holds no examples"),
    ("dummy_mnist", {"val_split": "bogus"}, "Unknown split 'bogus'"),
    ("", {}, "Unknown dataset '' (Parsing builder name string  failed.)"),
    ("cifar10:99.0.0", {}, "cannot be loaded at version 99.0.0"),
    ("cifar10/no_such_config", {}, "BuilderConfig no_such_config not found"),
])
def test_bad_split_and_builder_names_are_refused_in_one_line(tfds_dir, name, splits, expected):
    """A slice tensorflow-datasets cannot parse was refused over two lines, an empty one
    (`train[5:2]`) failed in TensorFlow when counted; an empty builder name was refused over 19
    lines, an unknown version with an AssertionError, and a `BUILDER/CONFIG` name taken for a
    missing image folder."""
    from keras_vit import data

    with pytest.raises(ValueError) as error:
        data.load_source(name, data_dir=tfds_dir, download=False, **splits)
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)
    assert "known splits: ['test', 'train']" in str(error.value) or not splits


def test_a_bad_split_from_the_command_line_is_exit_2_and_writes_nothing(tfds_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", tfds_dir)
    out = tmp_path / "run"
    fails(["train", "--data", "dummy_mnist", "--train-split", "train[:200%]", "--download", "false", "--output-dir", out],
          capsys, "Split 'train[:200%]' of 'dummy_mnist': Error parsing split")
    assert not out.exists()
