"""Hostile or damaged checkpoints and outputs (issue 22): one line and exit 2, never a
traceback, a hang, an unbounded allocation, or a user's file lost. File handling is the same
on every backend, so these run on one."""

import json
import os
import re
import subprocess
import zipfile

import h5py
import numpy as np
import pytest

from keras_vit.cli import main
from keras_vit.weights import convert_checkpoint
from tests.support.commands import fails, run_limited
from tests.support.checkpoints import edit_keras_config, original_npz_params

pytestmark = pytest.mark.backend_independent  # file handling: runs under one backend (tests/conftest.py)

GIB = 2**30


@pytest.fixture
def npz(tmp_path):
    path = tmp_path / "src" / "ckpt.npz"
    path.parent.mkdir()
    np.savez(path, **original_npz_params(np.random.default_rng(0)))
    return path


@pytest.fixture
def preset(npz, tmp_path):
    """A KerasHub classifier preset (5 classes, 4 heads), written by keras_vit."""
    convert_checkpoint(npz, tmp_path / "timm.safetensors")
    convert_checkpoint(tmp_path / "timm.safetensors", tmp_path / "preset", format="kerashub", num_heads=4)
    return tmp_path / "preset"


def edit_json(path, change):
    data = json.loads(path.read_text())
    data = change(data)
    path.write_text(json.dumps(data))


# ------------------------------------------------------------------ 1: --overwrite and inputs


def test_overwrite_never_replaces_the_folder_holding_the_input(npz, tmp_path, capsys):
    before = npz.read_bytes()
    (npz.parent / "notes.txt").write_text("mine")
    fails(["convert", npz, npz.parent, "--format", "hf", "--overwrite"], capsys, "holds the input")
    fails(["convert", npz, npz, "--overwrite"], capsys, "is or holds the input")
    assert npz.read_bytes() == before and (npz.parent / "notes.txt").read_text() == "mine"


def test_export_overwrite_never_replaces_the_run_folder(tmp_path):
    from keras_vit.inference import serving as export_lib

    run = tmp_path / "run"
    run.mkdir()
    (run / "best.keras").write_bytes(b"model")
    (run / "log.csv").write_text("epoch,loss\n")
    with pytest.raises(FileExistsError, match="holds the input"):
        export_lib.check_output("saved_model", str(run), str(run / "best.keras"), overwrite=True)
    assert sorted(os.listdir(run)) == ["best.keras", "log.csv"]


# ------------------------------------------------------------------ 4: disk full


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()})")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_fails_in_one_line_and_leaves_nothing(tmp_path, small_disk):
    """HDF5 writers used to print h5py tracebacks, then die of a segmentation fault, leaving
    their temporary file on the full disk."""
    np.savez(tmp_path / "big.npz", **original_npz_params(np.random.default_rng(0), hidden_dim=64, depth=4, mlp_dim=256))
    convert_checkpoint(tmp_path / "big.npz", tmp_path / "big.safetensors")  # exact GELU, as KerasHub needs
    (small_disk / "keep.txt").write_text("mine")
    (small_disk / "out.npz").write_bytes(b"old")
    source = ["convert", tmp_path / "big.safetensors", "--num-heads", "2", "--overwrite"]
    outputs = (["preset", "--format", "kerashub"], ["out.weights.h5"], ["out.npz"])
    done = run_limited([[*source[:2], small_disk / out[0], *source[2:], *out[1:]] for out in outputs])
    assert done.returncode == 0 and done.stdout.split() == ["rc", "75"] * 3, done.stdout + done.stderr  # EX_TEMPFAIL
    assert "Traceback" not in done.stderr and done.stderr.count("Not enough space") == 3, done.stderr
    assert done.stderr.count("\n") == 3, done.stderr
    assert sorted(os.listdir(small_disk)) == ["keep.txt", "out.npz"] and (small_disk / "out.npz").read_bytes() == b"old"


# ------------------------------------------------------------------ 6: declared sizes


def test_hdf5_tensor_declaring_more_than_it_stores_is_refused_before_reading(preset, tmp_path):
    """A 174 KB `.weights.h5` whose position embedding declares 8 GiB was allocated whole."""
    bare = tmp_path / "model.weights.h5"
    bare.write_bytes((preset / "model.weights.h5").read_bytes())
    with h5py.File(bare, "r+") as f:
        name = "layers/vi_t_patching_and_embedding/position_embedding/vars/0"
        del f[name]
        f.create_dataset(name, shape=(1 + 2**26, 32), dtype="float32")  # never written: stores nothing
    assert bare.stat().st_size < 2**20
    done = run_limited([["convert", bare, tmp_path / "out.npz", "--num-heads", "4"]])
    assert "rc 2" in done.stdout, done.stdout + done.stderr
    assert "declares a (67108865, 32) tensor" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.npz").exists()


def test_npz_member_declaring_more_than_it_holds_is_refused_before_reading(tmp_path):
    """An `.npz` member's header may declare any shape; a deflated one was allocated whole."""
    params = original_npz_params(np.random.default_rng(0))
    params["Transformer/encoderblock_0/LayerNorm_0/bias"] = np.zeros(32, np.float32)  # compresses 100-fold: fine
    with zipfile.ZipFile(tmp_path / "ok.npz", "w", zipfile.ZIP_DEFLATED) as zf:
        for key, value in params.items():
            with zf.open(key + ".npy", "w") as f:
                np.lib.format.write_array(f, value)
    with zipfile.ZipFile(tmp_path / "ok.npz") as src, zipfile.ZipFile(tmp_path / "odd.npz", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.startswith("Transformer/posembed_input"):
                header = {"descr": "<f4", "fortran_order": False, "shape": (1, 1 + 2**26, 32)}
                with dst.open(info.filename, "w") as f:
                    np.lib.format.write_array_header_1_0(f, header)
                    f.write(bytes(4096))
            else:
                dst.writestr(info.filename, data)
    done = run_limited([["convert", tmp_path / "ok.npz", tmp_path / "ok.safetensors"],
                        ["convert", tmp_path / "odd.npz", tmp_path / "odd.safetensors"]])
    assert [line for line in done.stdout.splitlines() if line.startswith("rc")] == ["rc 0", "rc 2"], done.stdout + done.stderr
    assert "declares shape (1, 67108865, 32)" in done.stderr and "Traceback" not in done.stderr


def test_tensor_shapes_are_checked_against_the_architecture(preset, tmp_path, capsys):
    with h5py.File(preset / "model.weights.h5", "r+") as f:
        name = "layers/vi_t_encoder/encoder_layers/vi_t_encoder_block_1/mlp/dense_1/vars/0"
        del f[name]
        f.create_dataset(name, data=np.zeros((32, 65), np.float32))
    fails(["convert", preset, tmp_path / "out.npz"], capsys, "encoderblock_1/MlpBlock_3/Dense_0/kernel' has shape (32, 65)",
          "needs (32, 64)")


def _inflated_keras(path, member_bytes):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("config.json", json.dumps({"class_name": "Functional", "config": {}}))
        with zf.open("model.weights.h5", "w", force_zip64=True) as member:
            chunk = bytes(2**24)
            for _ in range(member_bytes // len(chunk)):
                member.write(chunk)


def test_keras_member_unpacking_to_gigabytes_is_refused(tmp_path):
    """A few MB `.keras` whose deflated weights unpack to 1 GiB was read wholly into memory."""
    _inflated_keras(tmp_path / "bomb.keras", GIB)
    assert (tmp_path / "bomb.keras").stat().st_size < 8 * 2**20
    done = run_limited([["convert", tmp_path / "bomb.keras", tmp_path / "out.npz"]], limit_gib=1)
    assert "rc 2" in done.stdout, done.stdout + done.stderr
    assert "refusing it (weights compress at most" in done.stderr and "Traceback" not in done.stderr


# ------------------------------------------------------------------ 7: FIFOs


def test_fifo_in_a_preset_folder_is_refused_not_waited_on(preset, tmp_path):
    """A FIFO named like a preset's file used to block `convert` and `weights=` forever."""
    folders = []
    for name in ("config.json", "task.json", "extra.weights.h5"):
        folder = tmp_path / f"fifo-{name}"
        folder.mkdir()
        for entry in os.listdir(preset):
            if entry != name:
                (folder / entry).write_bytes((preset / entry).read_bytes())
        os.mkfifo(folder / name)
        folders.append(folder)
    done = run_limited([["convert", f, tmp_path / f"{f.name}.npz"] for f in folders], timeout=90)
    assert done.stdout.split() == ["rc", "2"] * 3, done.stdout + done.stderr
    assert done.stderr.count("not a regular file") == 3 and "Traceback" not in done.stderr


# ------------------------------------------------------------------ 9, 12, 13: configs


@pytest.mark.parametrize(
    "file, change, expected",
    [
        ("config.json", lambda c: [c], "config.json: expected a JSON object"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "patch_size": 0}}, "patch_size=0"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "image_shape": "abc"}}, "image_shape='abc'"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "image_shape": [-32, 32, 3]}}, "image_shape=[-32"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "num_heads": "two"}}, "num_heads='two'"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "num_heads": 2.5}}, "num_heads=2.5"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "num_heads": 10**30}}, "cannot split the model width 32"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "num_heads": 2}}, "(32, 2, 16)"),
        ("config.json", lambda c: {**c, "config": {**c["config"], "image_shape": [64, 64, 3]}}, "8x8 patch grid"),
        ("config.json", lambda c: {**c, "config": None}, "config.json: config is null"),
        ("task.json", lambda c: {**c, "config": None}, "task.json: config is null"),
        ("task.json", lambda c: 7, "task.json: expected a JSON object"),
        ("task.json", lambda c: {**c, "config": {**c["config"], "num_classes": 10}}, "declares a classifier of 10 classes"),
    ],
)
def test_kerashub_config_of_wrong_types_or_values_is_refused(preset, tmp_path, capsys, file, change, expected):
    edit_json(preset / file, change)
    fails(["convert", preset, tmp_path / "out.npz"], capsys, expected)
    assert not (tmp_path / "out.npz").exists()


@pytest.fixture
def deit_preset(tmp_path):
    """A KerasHub DeiTImageClassifier preset (5 classes), written by keras-hub."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.DeiTBackbone(patch_size=4, num_layers=1, hidden_dim=32, num_heads=2,
                                             intermediate_dim=64, image_shape=(16, 16, 3))
    keras_hub.models.DeiTImageClassifier(backbone=backbone, num_classes=5).save_to_preset(str(tmp_path / "deit"))
    return tmp_path / "deit"


@pytest.mark.parametrize("reader", ["preset", "deit_preset"])
@pytest.mark.parametrize("damage, expected", [
    ("no task.weights.h5", "declares a classifier of 5 classes, but the preset has no head weights (task.weights.h5 missing)"),
    (10, "declares a classifier of 10 classes, but the preset has a head of shape (32, 5)"),
    ("5", "task.json's num_classes='5'; expected a whole number >= 1"),
])
def test_classifier_preset_head_must_fit_its_task_json(request, tmp_path, capsys, reader, damage, expected):
    """A KerasHub DeiT classifier preset without task.weights.h5 converted without its head, and
    its task.json class count was not checked (the ViT preset's was)."""
    folder = request.getfixturevalue(reader)
    if damage == "no task.weights.h5":
        (folder / "task.weights.h5").unlink()
    else:
        edit_json(folder / "task.json", lambda c: {**c, "config": {**c["config"], "num_classes": damage}})
    fails(["convert", folder, tmp_path / "out.npz"], capsys, f"{folder}: ", expected)
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"num_attention_heads": "two"}, "num_heads='two'"),
        ({"num_attention_heads": 10**30}, "cannot split the model width 32"),
        ({"num_attention_heads": 2.5}, "num_heads=2.5"),
        ({"image_size": -32}, "image_size=-32"),
        ({"patch_size": "8"}, "patch_size='8'"),
        ({"layer_norm_eps": -1e-6}, "layer_norm_epsilon=-1e-06"),
        ({"image_size": 64}, "8x8 patch grid"),
    ],
)
def test_hugging_face_config_values_are_validated(npz, tmp_path, capsys, change, expected):
    convert_checkpoint(npz, tmp_path / "hf", format="hf")
    edit_json(tmp_path / "hf" / "config.json", lambda c: {**c, **change})
    fails(["convert", tmp_path / "hf", tmp_path / "out.npz"], capsys, expected)
    assert not (tmp_path / "out.npz").exists()


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    """transformers folders (random weights) of the DeiT, DINOv2, SigLIP, DINOv3 and SigLIP 2 readers."""
    transformers = pytest.importorskip("transformers")
    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
                 patch_size=8)
    folders = {}
    for name, model, config in (
        ("deit", "DeiTForImageClassificationWithTeacher", transformers.DeiTConfig(num_labels=3, **sizes)),
        ("dinov2", "Dinov2Model", transformers.Dinov2Config(**sizes)),
        ("siglip", "SiglipVisionModel", transformers.SiglipVisionConfig(**sizes)),
        ("dinov3", "DINOv3ViTModel", transformers.DINOv3ViTConfig(**sizes)),
        ("siglip2", "Siglip2VisionModel", transformers.Siglip2VisionConfig(
            **{k: v for k, v in sizes.items() if k != "image_size"}, num_patches=16)),
    ):
        folders[name] = tmp_path_factory.mktemp(name)
        getattr(transformers, model)(config).save_pretrained(folders[name])
    return folders


FAMILY_CONFIG_CASES = [
    *((family, change, expected) for family in ("deit", "dinov2", "siglip", "dinov3") for change, expected in (
        (lambda c: {**c, "patch_size": 0}, "patch_size=0; expected a whole number >= 1"),
        (lambda c: {**c, "patch_size": "8"}, "patch_size='8'; expected a whole number >= 1"),
        (lambda c: {**c, "image_size": None}, "image_size=None; expected a whole number >= 1"),
        (lambda c: {**c, "image_size": [32, 32, 32]}, "image_size=[32, 32, 32]; expected a whole number >= 1"),
    )),
    *(("siglip2", change, expected) for change, expected in (  # NaFlex: no image_size; patch_size shapes the kernel
        (lambda c: {**c, "patch_size": 0}, "patch_size=0; expected a whole number >= 1"),
        (lambda c: {**c, "patch_size": "8"}, "patch_size='8'; expected a whole number >= 1"),
    )),
    ("siglip", lambda c: {"model_type": "siglip", "vision_config": [c]}, "vision_config is a list; expected a JSON object"),
    ("siglip", lambda c: {"model_type": "siglip", "vision_config": None}, "vision_config is a NoneType; expected"),
]


@pytest.mark.parametrize("family, change, expected", FAMILY_CONFIG_CASES)
def test_family_config_values_are_validated(family_folders, tmp_path, capsys, family, change, expected):
    """The DeiT / DINOv2 / SigLIP / DINOv3 readers divided `image_size` by `patch_size` unchecked
    (ZeroDivisionError, TypeError) and read a SigLIP pair's `vision_config` as an object."""
    folder = tmp_path / family
    folder.mkdir()
    for name in os.listdir(family_folders[family]):
        (folder / name).write_bytes((family_folders[family] / name).read_bytes())
    edit_json(folder / "config.json", change)
    fails(["convert", folder, tmp_path / "out.npz"], capsys, f"{folder}: ", expected)
    with pytest.raises(ValueError, match=re.escape(expected)):
        convert_checkpoint(folder, tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


# ------------------------------------------------------------------ 10: damaged .keras


def test_keras_file_with_a_bad_crc_is_refused_in_one_line(tmp_path, capsys):
    good = tmp_path / "good.keras"
    with zipfile.ZipFile(good, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("config.json", json.dumps({"class_name": "Functional", "config": {"layers": []}}))
        zf.writestr("model.weights.h5", b"\0" * 64)
    data = bytearray(good.read_bytes())
    start = data.index(b'"class_name"')
    data[start + 1] ^= 0x20  # config.json's bytes no longer match their CRC-32
    (tmp_path / "bad.keras").write_bytes(bytes(data))
    fails(["convert", tmp_path / "bad.keras", tmp_path / "out.npz"], capsys, "bad.keras: a damaged .keras file")


@pytest.mark.parametrize("command", ["convert", "from_checkpoint", "train --weights"])
def test_keras_file_with_one_flipped_bit_in_its_weights_is_refused_in_one_line(tmp_path, capsys, command):
    """A bit flipped inside the stored weights member raised BadZipFile (a traceback) from h5py's
    read of the member in convert and train --weights."""
    import keras_vit

    small = dict(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3), classes=3)
    keras_vit.VisionTransformer(**small).save(tmp_path / "m.keras")
    data = bytearray((tmp_path / "m.keras").read_bytes())
    with zipfile.ZipFile(tmp_path / "m.keras") as zf:
        info = zf.getinfo("model.weights.h5")
    assert info.compress_type == zipfile.ZIP_STORED
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2] ^= 1
    bad = tmp_path / "flipped.keras"
    bad.write_bytes(bytes(data))
    expected = f"{bad}: a damaged .keras file (Bad CRC-32 for file 'model.weights.h5')"
    if command == "from_checkpoint":
        with pytest.raises(ValueError, match=re.escape(expected)):
            keras_vit.from_checkpoint(bad)
    elif command == "convert":
        fails(["convert", bad, tmp_path / "out.npz"], capsys, expected)
    else:
        architecture = ["--model", "custom", "--patch-size", "4", "--hidden-dim", "16", "--depth", "1", "--num-heads",
                        "2", "--mlp-dim", "32", "--image-size", "16", "--data", tmp_path / "data.npz"]
        np.savez(tmp_path / "data.npz", x_train=np.zeros((4, 16, 16, 3), np.uint8), y_train=np.arange(4) % 2)
        fails(["train", "--weights", bad, *architecture, "--steps", "1", "--batch-size", "2",
               "--output-dir", tmp_path / "run"], capsys, expected)
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("kind, expected", [
    ("fifo", "is not a regular file but a FIFO (named pipe); refusing to read it as a checkpoint"),
    ("loop", "is not a regular file but a symbolic link loop"),
    ("dev_null", "is not a regular file but a device"),
])
def test_convert_names_what_a_checkpoint_path_is(tmp_path, capsys, kind, expected):
    """`convert` on a FIFO said "No checkpoint file or folder", as if nothing were there."""
    path = tmp_path / "ckpt.npz"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        os.symlink(path, path)
    else:
        os.symlink("/dev/null", path)
    fails(["convert", path, tmp_path / "out.npz"], capsys, f"{path} {expected}")


# ------------------------------------------------------------------ 14, 15: what convert writes


@pytest.mark.parametrize(
    "key, shape, expected",
    [
        ("Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel", (32, 5), "needs (32, 4, 8)"),
        ("Transformer/posembed_input/pos_embedding", (17,), "position embeddings of shape (17,)"),
        ("head/kernel", (31, 5), "needs (32, 5)"),
    ],
)
def test_impossible_shapes_are_never_written(tmp_path, capsys, key, shape, expected):
    params = original_npz_params(np.random.default_rng(0))
    params[key] = np.zeros(shape, np.float32)
    np.savez(tmp_path / "odd.npz", **params)
    for output in ("out.npz", "out.safetensors", "hf"):
        fails(["convert", tmp_path / "odd.npz", tmp_path / output], capsys, expected)
        assert not (tmp_path / output).exists()


def test_convert_never_writes_into_a_checkpoint_folder(npz, preset, capsys):
    before = {name: (preset / name).read_bytes() for name in os.listdir(preset)}
    for name, extra in (("model.safetensors", []), ("model.weights.h5", ["--overwrite"]), ("other.weights.h5", [])):
        fails(["convert", npz, preset / name, *extra], capsys, "holds a checkpoint", "choose an output outside")
    assert {name: (preset / name).read_bytes() for name in os.listdir(preset)} == before
    assert main(["convert", str(npz), str(preset.parent / "elsewhere.safetensors")]) == 0


def test_deflated_keras_file_still_reads(tmp_path):
    """A `.keras` whose weights member is compressed is unpacked to a temporary file, not memory."""
    import keras_vit
    from tests.support.checkpoints import TINY

    keras_vit.VisionTransformer(**TINY, classes=5, input_shape=(32, 32, 3)).save(tmp_path / "stored.keras")
    with zipfile.ZipFile(tmp_path / "stored.keras") as src, zipfile.ZipFile(tmp_path / "deflated.keras", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    for name in ("stored", "deflated"):
        convert_checkpoint(tmp_path / f"{name}.keras", tmp_path / f"{name}.npz")
    stored, deflated = np.load(tmp_path / "stored.npz"), np.load(tmp_path / "deflated.npz")
    assert sorted(stored) == sorted(deflated) and all(np.array_equal(stored[k], deflated[k]) for k in stored)


def test_keras_file_metadata_of_wrong_types_is_refused(tmp_path, capsys):
    import keras_vit
    from tests.support.checkpoints import TINY

    keras_vit.VisionTransformer(**TINY, classes=5, input_shape=(32, 32, 3)).save(tmp_path / "m.keras")
    for layer_class, field, value, expected in (
        ("Encoder", "approximate_gelu", "yes", "approximate_gelu='yes'"),
        ("Encoder", "layer_norm_epsilon", 0, "layer_norm_epsilon=0"),
        ("TokenPooling", "mode", "max", "pooling='max'"),
    ):
        edit_keras_config(tmp_path / "m.keras", tmp_path / "odd.keras", layer_class, field, value)
        fails(["convert", tmp_path / "odd.keras", tmp_path / "out.npz"], capsys, expected)


def test_a_checkpoint_is_checked_before_it_is_written(npz, tmp_path):
    from keras_vit.weights import read_checkpoint
    from keras_vit.weights.lazy import LazyArray

    ckpt = read_checkpoint(npz)
    ckpt.tensors["Transformer/encoder_norm/scale"] = LazyArray.wrap(np.ones(31, np.float32), "edited")
    with pytest.raises(ValueError, match=r"encoder_norm/scale' has shape \(31,\)"):
        convert_checkpoint(ckpt, tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


def test_a_failed_write_is_one_line_and_leaves_nothing(npz, tmp_path, capsys, monkeypatch):
    from keras_vit.utils.files import atomic_path
    from keras_vit.weights import containers

    def failing(path, tensors):
        with atomic_path(path) as tmp:
            open(tmp, "wb").close()
            raise RuntimeError("Can't decrement id ref count (file write failed: time = ...\n, errno = 5)")

    monkeypatch.setattr(containers, "write_npz", failing)
    (tmp_path / "out.npz").write_bytes(b"old")
    fails(["convert", npz, tmp_path / "out.npz", "--overwrite"], capsys, "Writing", "out.npz failed: Can't decrement")
    assert sorted(os.listdir(tmp_path)) == ["out.npz", "src"] and (tmp_path / "out.npz").read_bytes() == b"old"


# ------------------------------------------------------------------ JSON nested too deeply

DEEP = "[" * 200_000 + "]" * 200_000  # past Python's recursion limit: json.loads raised RecursionError


def _deep_keras(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("config.json", DEEP)
        zf.writestr("model.weights.h5", b"")
    return path


def _deep_state(tmp_path):
    (tmp_path / "state.json").write_text(DEEP)
    from keras_vit.training.checkpointing import read_state
    read_state(str(tmp_path))


def _deep_peft(tmp_path):
    from keras_vit.lora import adapter, layouts
    (tmp_path / layouts.PEFT_CONFIG).write_text(DEEP)
    (tmp_path / layouts.PEFT_WEIGHTS).write_bytes(b"")
    adapter.read(tmp_path)


def _deep_hf_folder(tmp_path):
    (tmp_path / "config.json").write_text(DEEP)
    from safetensors.numpy import save_file
    save_file({"embeddings.cls_token": np.zeros((1, 1, 8), "float32")}, str(tmp_path / "model.safetensors"))
    convert_checkpoint(tmp_path, tmp_path / "out.npz")


def _deep_from_checkpoint(tmp_path):
    from keras_vit.weights import read_checkpoint
    read_checkpoint(str(_deep_keras(tmp_path / "model.keras")))


def _deep_load_model(tmp_path):
    from keras_vit.run_folder import load_keras_file
    load_keras_file(str(_deep_keras(tmp_path / "model.keras")))


@pytest.mark.parametrize("read", [_deep_state, _deep_peft, _deep_hf_folder, _deep_from_checkpoint, _deep_load_model],
                         ids=lambda f: f.__name__[len("_deep_"):])
def test_json_nested_too_deeply_is_refused_in_one_line(tmp_path, read):
    """`state.json`, a PEFT `adapter_config.json`, a Hugging Face `config.json`, a `.keras`
    file's `config.json`: a RecursionError traceback, now a one-line ValueError as other
    malformed JSON."""
    with pytest.raises(ValueError) as error:
        read(tmp_path)
    assert "\n" not in str(error.value) and "nested too deeply" in str(error.value), str(error.value)
