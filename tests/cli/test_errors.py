"""`keras-vit` on bad input: exit code 2 and one clear line, never a traceback; and what
`export` and `convert` never overwrite."""

import os
import re
import pickle
import sys

import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving as export_lib
from tests.support.checkpoints import TINY, original_npz_params

SMALL = dict(patch_size=4, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=3)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.keras"
    keras_vit.VisionTransformer(**SMALL).save(path)
    return path


@pytest.fixture
def npz(rng, tmp_path):
    path = tmp_path / "ckpt.npz"
    np.savez(path, **original_npz_params(rng, **TINY, classes=5))
    return path


def fails(argv, capsys, *fragments):
    """Runs the command; asserts exit code 2 and one error line holding every fragment."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    line = next(line for line in err.splitlines() if ": error: " in line)
    for fragment in fragments:
        assert str(fragment) in line, (fragment, line)
    return line


def fake_saved_model(marker):
    """A stand-in for the SavedModel writer: a folder shaped like one, holding `marker`."""

    def write(model, fmt, output):
        os.makedirs(os.path.join(output, "variables"))
        with open(os.path.join(output, "saved_model.pb"), "w") as f:
            f.write(marker)
        return True

    return write


# ------------------------------------------------------------------------- clear errors


def test_onnx_export_without_onnxscript(model_file, tmp_path, capsys, monkeypatch):
    for name in ("onnxscript", "tf2onnx", "jax2onnx"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    output = tmp_path / "m.onnx"
    fails(["export", model_file, "--format", "onnx", "--output", output], capsys, "onnxscript", "not installed")
    assert os.listdir(tmp_path) == []


def test_export_to_a_path_that_cannot_be_written(model_file, tmp_path, capsys):
    (tmp_path / "afile").write_text("a file, not a folder")
    fails(
        ["export", model_file, "--format", "saved_model", "--output", tmp_path / "afile" / "out"], capsys,
        f"Cannot write {tmp_path}/afile/out", "is a file, not a folder",
    )
    if os.path.isdir("/proc"):
        fails(["export", model_file, "--format", "saved_model", "--output", "/proc/keras_vit_out"], capsys,
              "Cannot write /proc/keras_vit_out")


def test_pickle_named_safetensors(tmp_path, capsys):
    path = tmp_path / "weights.safetensors"
    with open(path, "wb") as f:
        pickle.dump({"w": np.zeros(3)}, f)
    fails(["convert", path, tmp_path / "out.npz"], capsys, str(path), "refused to load")


def test_torch_state_dict_named_safetensors_is_read_as_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from keras_vit.weights.containers import open_checkpoint

    torch.save({"w": torch.arange(3.0)}, tmp_path / "weights.safetensors")
    raw = open_checkpoint(tmp_path / "weights.safetensors")
    assert raw.container == "torch"
    np.testing.assert_array_equal(raw.tensors["w"].load(), [0.0, 1.0, 2.0])


def test_truncated_image_with_on_corrupt_error(tmp_path, capsys, rng):
    from PIL import Image

    for name in ("cat", "dog"):
        os.makedirs(tmp_path / "data" / name)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp_path / "data" / name / f"{i}.png")
    broken = tmp_path / "data" / "cat" / "1.png"
    broken.write_bytes(broken.read_bytes()[:60])
    fails(
        ["train", "--data", tmp_path / "data", "--on-corrupt", "error", "--output-dir", tmp_path / "run",
         "--image-size", "16", "--patch-size", "4"],
        capsys, "not readable images", str(broken),
    )


def test_zero_patch_size(tmp_path, capsys):
    with pytest.raises(ValueError, match=re.escape("patch_size=0 must be in [1, 262144].")):
        keras_vit.VisionTransformer(**{**SMALL, "patch_size": 0})
    fails(["train", "--patch-size", "0", "--output-dir", tmp_path / "run"], capsys, "patch_size=0")


def test_truncated_weights_h5_names_the_file(tmp_path, capsys):
    model = keras_vit.VisionTransformer(**SMALL)
    model.save_weights(tmp_path / "w.weights.h5")
    data = (tmp_path / "w.weights.h5").read_bytes()
    (tmp_path / "t.weights.h5").write_bytes(data[: len(data) // 2])
    fails(["convert", tmp_path / "t.weights.h5", tmp_path / "out.npz"], capsys, f"{tmp_path}/t.weights.h5", "truncated")
    with pytest.raises(ValueError, match=f"{tmp_path}/t.weights.h5: corrupt or truncated"):
        keras_vit.VisionTransformer(**SMALL, weights=str(tmp_path / "t.weights.h5"))


# ------------------------------------------------------------------------- never overwritten


def test_export_refuses_an_unrelated_folder_which_survives_a_failing_export(model_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["export", model_file, "--format", "saved_model", "--output", out, "--no-verify"]
    fails(argv, capsys, f"{out} already exists", "--overwrite")

    def failing(model, fmt, output):
        os.makedirs(output)
        open(os.path.join(output, "saved_model.pb"), "w").close()
        raise OSError("disk full")

    monkeypatch.setattr(export_lib, "_write", failing)
    fails([*argv, "--overwrite"], capsys, "disk full")
    assert os.listdir(tmp_path) == ["out"] and os.listdir(out) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine"


def test_export_never_replaces_the_keras_file(model_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(export_lib, "_write", fake_saved_model("new"))
    before = model_file.read_bytes()
    other = tmp_path / "other.keras"
    other.write_bytes(before)
    for extra in ([], ["--overwrite"]):
        fails(["export", model_file, "--format", "saved_model", "--output", other, *extra], capsys,
              f"{other} is a file; refusing to replace it by a folder")
        fails(["export", model_file, "--format", "onnx", "--output", model_file, "--no-verify", *extra], capsys,
              f"{model_file} is or holds the input")
    fails(["export", model_file, "--format", "onnx", "--output", other, "--no-verify"], capsys, f"{other} already exists")
    assert model_file.read_bytes() == before and other.read_bytes() == before


def test_export_replaces_an_earlier_export(model_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "vit.savedmodel"
    monkeypatch.setattr(export_lib, "_write", fake_saved_model("old"))
    assert main(["export", str(model_file), "--format", "saved_model", "--output", str(out), "--no-verify"]) == 0
    monkeypatch.setattr(export_lib, "_write", fake_saved_model("new"))
    assert main(["export", str(model_file), "--format", "saved_model", "--output", str(out), "--no-verify"]) == 0
    assert (out / "saved_model.pb").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["vit.savedmodel", "vit.savedmodel.serving.json"]


def test_convert_refuses_an_existing_destination(npz, tmp_path, capsys):
    dst = tmp_path / "out.npz"
    dst.write_text("precious")
    fails(["convert", npz, dst], capsys, f"{dst} already exists", "--overwrite")
    assert dst.read_text() == "precious"
    assert main(["convert", str(npz), str(dst), "--overwrite"]) == 0
    with np.load(dst) as converted, np.load(npz) as source:
        assert set(converted.files) == set(source.files)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    fails(["convert", npz, folder, "--format", "hf"], capsys, f"{folder} already exists")
    fails(["convert", npz, dst, "--format", "hf", "--overwrite"], capsys, f"{dst} is a file; refusing to replace it by a folder")
    assert (folder / "notes.txt").read_text() == "mine"


def test_weights_export_refuses_an_existing_path(npz, tmp_path):
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights=str(npz))
    (tmp_path / "hf").mkdir()
    with pytest.raises(FileExistsError, match="already exists; refusing to overwrite"):
        keras_vit.weights.export(model, tmp_path / "hf", format="hf")
    keras_vit.weights.export(model, tmp_path / "hf", format="hf", overwrite=True)
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors", "preprocessor_config.json"]
    with pytest.raises(FileExistsError, match="is a file; refusing to replace it by a folder"):
        keras_vit.weights.export(model, npz, format="hf", overwrite=True)


# ------------------------------------------------------------------------- permissions


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_written_files_get_normal_permissions(npz, tmp_path, umask_022):
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights=str(npz))
    out = tmp_path / "out"
    keras_vit.weights.export(model, out / "a.npz", format="npz")
    keras_vit.weights.export(model, out / "b.safetensors", format="timm")
    keras_vit.weights.export(model, out / "hf", format="hf")
    for name in ("c.keras", "d.weights.h5", "e.safetensors", "f.npz", "g"):
        keras_vit.weights.convert_checkpoint(npz, out / name, format="hf" if name == "g" else None)
    modes = {}
    for root, folders, names in os.walk(out):
        for name in folders + names:
            path = os.path.join(root, name)
            modes[os.path.relpath(path, out)] = oct(os.stat(path).st_mode & 0o777)
    expected_files = ["a.npz", "b.safetensors", "c.keras", "d.weights.h5", "e.safetensors", "f.npz",
                      "hf/config.json", "hf/model.safetensors", "hf/preprocessor_config.json",
                      "g/config.json", "g/model.safetensors", "g/preprocessor_config.json"]
    assert modes == {**{k: oct(0o644) for k in expected_files}, "hf": oct(0o755), "g": oct(0o755)}


def test_only_an_earlier_keras_vit_onnx_export_is_recognised(model_file, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [value("x", TensorProto.FLOAT, [1])], [value("y", TensorProto.FLOAT, [1])]
    )
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    (tmp_path / "notes.onnx").write_text("not a model")
    assert not export_lib.is_export("onnx", tmp_path / "m.onnx")  # a valid ONNX file, but not ours
    export_lib._mark("onnx", str(tmp_path / "m.onnx"))
    assert export_lib.is_export("onnx", tmp_path / "m.onnx")
    assert not export_lib.is_export("onnx", tmp_path / "notes.onnx")
    assert not export_lib.is_export("onnx", model_file)
    assert not export_lib.is_export("saved_model", tmp_path)


# ------------------------------------------------------------------------- LoRA settings


@pytest.fixture(scope="module")
def lora_file(tmp_path_factory):
    from keras_vit.lora import adapter

    model = keras_vit.VisionTransformer(**SMALL)
    adapter.enable(model, 2)
    path = tmp_path_factory.mktemp("lora") / "lora.npz"
    adapter.save(model, path)
    return path


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda s: {**s, "rank": "2"}, "rank='2' (expected a whole number >= 1)"),
        (lambda s: {**s, "rank": 10**12}, "rank=1000000000000 but A matrices of rank 2"),
        (lambda s: {**s, "alpha": "x"}, "alpha='x' (expected a finite number > 0)"),
        (lambda s: {**s, "alpha": float("nan")}, "alpha=nan (expected a finite number > 0)"),
        (lambda s: {**s, "alpha": float("inf")}, "alpha=inf (expected a finite number > 0)"),
        (lambda s: {k: v for k, v in s.items() if k != "alpha"}, "alpha=None (expected a finite number > 0)"),
        (lambda s: {**s, "targets": None}, "targets=None (expected a list of names among qkv, out, mlp)"),
        (lambda s: {**s, "num_heads": "2"}, "num_heads='2' (expected a whole number >= 1)"),
        (lambda s: [s], "its LoRA settings are a list; expected a JSON object"),
    ],
)
def test_malformed_lora_settings_are_refused(lora_file, tmp_path, capsys, change, expected):
    """`lora.load` of alpha NaN gave a model of NaNs, a huge rank allocated it, wrong types raised
    TypeError / AttributeError / KeyError; `export --format peft` of the same file too."""
    import json

    from keras_vit.lora import adapter

    with np.load(lora_file) as stored:
        arrays = {key: stored[key] for key in stored.files if key != "__settings__"}
        settings = json.loads(str(stored["__settings__"]))
    bad = tmp_path / "lora.npz"
    np.savez(bad, __settings__=json.dumps(change(settings)), **arrays)
    with pytest.raises(ValueError, match=re.escape(f"{bad}: its LoRA settings")) as info:
        adapter.load(keras_vit.VisionTransformer(**SMALL), bad)
    assert expected in str(info.value)
    fails(["export", bad, "--format", "peft", "--output", tmp_path / "peft"], capsys, expected)
    assert not (tmp_path / "peft").exists()


@pytest.mark.parametrize("options, expected", [
    (dict(rank=10**11), "lora_rank=100000000000 must be in [1, 32]"),
    (dict(rank=2, alpha=float("nan")), "lora_alpha=nan must be a finite number > 0"),
    (dict(rank=2, alpha="2"), "lora_alpha='2' must be a finite number > 0"),
])
def test_lora_options_out_of_range_are_refused(options, expected):
    """A rank above the projections' width asked for terabytes; alpha NaN gave NaN outputs."""
    from keras_vit.lora import adapter

    model = keras_vit.VisionTransformer(**SMALL)
    with pytest.raises(ValueError, match=re.escape(expected)):
        adapter.enable(model, options["rank"], alpha=options.get("alpha"))
    assert not any("lora" in v.path for v in model.weights)


# ------------------------------------------------------------------------- a run's files beside a model


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run folder as `train` leaves it (best.keras, classes.json, config.json) and its image folder."""
    import json

    from PIL import Image

    root = tmp_path_factory.mktemp("runmeta")
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        (root / "data" / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / "data" / name / f"{i}.png")
    (root / "run").mkdir()
    keras_vit.VisionTransformer(**SMALL).save(root / "run" / "best.keras")
    classes = {"class_names": ["a", "b", "c"], "image_size": 16, "eval_crop": 1.0}
    config = {"data": str(root / "data"), "seed": 0, "val_fraction": 0.5}
    return root, {"classes.json": json.dumps(classes), "config.json": json.dumps(config)}


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("name, change, expected", [
    ("classes.json", {"class_names": "abc"}, "classes.json: class_names='abc'; expected a list of strings"),
    ("classes.json", {"class_names": ["a", "b"]}, "classes.json names 2 classes; the model"),
    ("classes.json", {"image_size": 0}, "classes.json: image_size=0; expected a whole number >= 1"),
    ("classes.json", {"eval_crop": "x"}, "classes.json: eval_crop='x' must be a number in (0, 1]"),
    ("classes.json", {"eval_crop": None}, "classes.json: eval_crop is null"),
    ("config.json", {"seed": "x"}, "seed='x' must be a whole number >= 0 (as recorded in"),
    ("config.json", {"train_split": 3}, "train_split=3 must be a path or split name"),
])
def test_run_files_beside_a_model_are_checked(run_folder, capsys, command, name, change, expected):
    """predict / evaluate used classes.json / config.json unchecked: IndexError, ZeroDivisionError,
    TypeError, or wrong class names printed."""
    import json

    root, recorded = run_folder
    for file, text in recorded.items():
        (root / "run" / file).write_text(json.dumps({**json.loads(text), **change}) if file == name else text)
    model = root / "run" / "best.keras"
    argv = ["predict", root / "data" / "a" / "0.png", "--model", model] if command == "predict" else ["evaluate", model]
    if command == "predict" and name == "config.json":
        assert main([str(a) for a in argv]) == 0  # predict reads no config.json value
        return
    fails(argv, capsys, expected)


# ------------------------------------------------------------------------- non-UTF-8 file names

NOT_UTF8 = os.fsdecode(b"caf\xe9")  # Latin-1 bytes: the file system's name, not UTF-8 text


@pytest.mark.parametrize("where", ["data folder", "checkpoint", "output dir"])
def test_file_names_that_are_not_utf8(tmp_path, capsys, where):
    """Undecodable bytes in a name: a data folder's images are read (TensorFlow stopped on them),
    a checkpoint converts, a run folder TensorBoard cannot write to is refused at the start."""
    from PIL import Image

    from tests.support.checkpoints import TINY

    root = tmp_path / "data"
    rng = np.random.default_rng(0)
    for name in ("a", NOT_UTF8):
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / name / f"{NOT_UTF8}{i}.png")
    if where == "data folder":
        keras_vit.VisionTransformer(**{**SMALL, "classes": 2}).save(tmp_path / "m.keras")
        assert main(["evaluate", str(tmp_path / "m.keras"), "--data", str(root)]) == 0
        assert "top-1" in capsys.readouterr().out
    elif where == "checkpoint":
        source = tmp_path / f"{NOT_UTF8}.npz"
        np.savez(source, **original_npz_params(np.random.default_rng(0), **TINY))
        assert main(["convert", str(source), str(tmp_path / f"{NOT_UTF8}.safetensors")]) == 0
        assert os.path.isfile(tmp_path / f"{NOT_UTF8}.safetensors")
    else:
        run = tmp_path / f"run-{NOT_UTF8}"
        fails(["train", "--data", root, "--image-size", "16", "--patch-size", "4", "--output-dir", run], capsys,
              "is not UTF-8 text, which TensorBoard's writer needs", "tensorboard=false")
        assert not run.exists()


# ------------------------------------------------------------------------- optional packages


@pytest.mark.backend_independent  # the run's log files (training on each backend: tests/training)
def test_fewshot_every_without_the_tensorboard_package(tmp_path, capsys, monkeypatch):
    """--fewshot-every wrote its TensorBoard scalars with tf.summary, which stops the run with
    TBNotInstalledError without the package; now the few-shot rows go to fewshot.csv and log.csv,
    and TensorBoard is skipped with one warning, as for the training logs."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    run = tmp_path / "run"
    argv = ["train", "--data", "digits", "--output-dir", run, "--steps", "4", "--batch-size", "32",
            "--reference-batch-size", "32", "--image-size", "8", "--model", "custom", "--patch-size", "2",
            "--hidden-dim", "16", "--depth", "1", "--num-heads", "2", "--mlp-dim", "32", "--fewshot-every", "2",
            "--verbose", "0"]
    with pytest.warns(UserWarning, match="TensorBoard logs skipped: the `tensorboard` package is not installed"):
        assert main([str(a) for a in argv]) == 0, capsys.readouterr().err
    assert not (run / "tensorboard").exists()
    assert (run / "fewshot.csv").read_text().count("\n") == 3  # the header, steps 2 and 4


@pytest.mark.parametrize("fmt, mode, expected", [
    ("onnx", "int4", "--quantize int4 cannot be exported as onnx: onnx takes int8, float8; a int4 model exports as "
                     "saved_model, litert, openvino, torch"),
    ("litert", "int8", "--quantize int8 cannot be exported as litert: litert takes int4"),
    ("openvino", "float8", "openvino takes int4; a float8 model exports as saved_model, onnx, torch"),
    ("saved_model,onnx", "int4", "cannot be exported as onnx"),
])
def test_export_of_a_quantization_a_format_does_not_take(model_file, tmp_path, capsys, fmt, mode, expected):
    """onnx int4 stopped in onnxruntime with a traceback (litert int8 / float8 in its converter)."""
    fails(["export", model_file, "--format", fmt, "--quantize", mode, "--output", tmp_path / "out"], capsys, expected)
    assert os.listdir(tmp_path) == []


def test_evaluate_counts_only_the_images_it_evaluated(tmp_path, capsys):
    """A complete PNG damaged inside passes the folder scan and is dropped by the decoder;
    evaluate counted it as evaluated."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in ("a", "b", "c"):
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(2):
                image = Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
                image.save(tmp_path / "data" / split / name / f"{i}.png")
    damaged = tmp_path / "data" / "val" / "b" / "1.png"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the image data: its CRC fails; the end marker stays
    damaged.write_bytes(bytes(data))
    keras_vit.VisionTransformer(**SMALL).save(tmp_path / "m.keras")
    assert main(["evaluate", str(tmp_path / "m.keras"), "--data", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert "on 5 validation examples (1 skipped: files the decoder could not read)" in out, out


@pytest.mark.parametrize("argv, expected", [
    (["--batch-size", "0"], "batch_size=0 must be a whole number >= 1"),
    (["--batch-size", "0", "--fewshot", "1"], "batch_size=0 must be a whole number >= 1"),
])
def test_evaluate_refuses_a_batch_size_below_one(model_file, capsys, argv, expected):
    """`evaluate --batch-size 0` ended in a tf.data traceback (both paths)."""
    fails(["evaluate", model_file, "--data", "digits", *argv], capsys, expected)


@pytest.mark.parametrize("flag", ["--mixup", "--cutmix"])
def test_mixing_alphas_beyond_a_sane_bound_are_refused(tmp_path, capsys, flag):
    fails(["train", flag, "1e9", "--output-dir", tmp_path / "run"], capsys, "must be in [0, 100]")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("top", [0, 1.5, "3", True, -2])
def test_decode_predictions_refuses_a_top_that_is_not_a_count(top):
    with pytest.raises(ValueError, match=r"top=.* must be a whole number >= 1"):
        keras_vit.decode_predictions(np.full((1, 1000), 1e-3), top=top)


def test_decode_predictions_takes_numpy_counts_and_refuses_scores_that_are_not_numbers():
    assert len(keras_vit.decode_predictions(np.full((1, 1000), 1e-3), top=np.int64(2))[0]) == 2
    with pytest.raises(ValueError, match="expects numbers"):
        keras_vit.decode_predictions(np.full((1, 1000), "a"))
