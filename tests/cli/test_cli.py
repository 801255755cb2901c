"""The `keras-vit` command line as installed: commands that need no model (and every `--help`)
start without Keras or TensorFlow, `convert`, `predict` and `inspect` run without TensorFlow on
JAX / PyTorch, `--help` shows what each option takes, bad values stop before heavy imports,
logs to a pipe are one line per epoch, and ONNX exports of any-size models."""

import argparse
import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from tests.support.models import randomize
from keras_vit.cli import build_parser
from tests.support.checkpoints import TINY, original_npz_params

BACKEND = keras.backend.backend()

# `keras-vit ARGS` as the console script runs it (sys.argv[0] == "keras-vit"), optionally with
# every top-level `tensorflow*` module made unimportable as if not installed (a None entry in
# sys.modules: `import` raises ModuleNotFoundError and `importlib.util.find_spec` returns
# None); reports on stderr whether Keras / TensorFlow were imported. COMMANDS: one ARGS or
# several, run in turn in the same process (the exit code is the last one's).
RUNNER = """
import json, pkgutil, sys

if HIDE:
    for module in pkgutil.iter_modules():
        if module.name.startswith("tensorflow"):
            sys.modules[module.name] = None
sys.argv[0] = "keras-vit"
from keras_vit.cli import main
for args in COMMANDS:
    try:
        code = main(args)
    except SystemExit as exit:
        code = exit.code
print("IMPORTED", json.dumps({m: sys.modules.get(m) is not None for m in ("keras", "tensorflow")}), file=sys.stderr)
sys.exit(code)
"""


def keras_vit_command(*args, hide_tensorflow=False, cwd=None, env=None, commands=None):
    """`(completed process, {"keras": imported?, "tensorflow": imported?})` of `keras-vit ARGS`
    (or of each ARGS of `commands` in one process)."""
    code = RUNNER.replace("HIDE", repr(hide_tensorflow)).replace("COMMANDS", repr(commands or [list(args)]))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600,
        env=env or os.environ,
    )
    found = re.search(r"^IMPORTED (.*)$", proc.stderr, re.M)
    assert found, proc.stderr[-3000:]
    return proc, json.loads(found.group(1))


def test_help_and_list_models_need_neither_keras_nor_tensorflow():
    proc, imported = keras_vit_command("--help", hide_tensorflow=True)
    assert proc.returncode == 0 and "list-models" in proc.stdout and "--verbose" in proc.stdout
    assert imported == {"keras": False, "tensorflow": False}
    proc, imported = keras_vit_command("list-models", hide_tensorflow=True)
    assert proc.returncode == 0, proc.stderr
    assert "ViTB16" in proc.stdout and "R50ViTB16" in proc.stdout
    assert imported == {"keras": False, "tensorflow": False}


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    """`keras-vit list-weights | head -1`: the pipe closes before the listing is written."""
    code = "import sys; sys.argv[0] = 'keras-vit'; from keras_vit.cli import main; sys.exit(main(['list-weights']))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child has imported anything: its first write finds no reader
    stderr = proc.communicate(timeout=600)[1].decode()
    assert stderr == "" and proc.returncode == 1


def test_list_models_is_data():
    assert keras_vit.list_models() == [*keras_vit.VARIANTS, "R50ViTB16", *keras_vit.FAMILIES]
    assert all(callable(getattr(keras_vit, name)) for name in keras_vit.list_models())


def test_convert_runs_without_tensorflow(tmp_path):
    params = original_npz_params(np.random.default_rng(0), **TINY)
    np.savez(tmp_path / "tiny.npz", **params)
    proc, imported = keras_vit_command("convert", "tiny.npz", "tiny.safetensors", hide_tensorflow=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert imported == {"keras": False, "tensorflow": False}
    from safetensors.numpy import load_file

    np.testing.assert_array_equal(load_file(tmp_path / "tiny.safetensors")["cls_token"], params["cls"])


def test_convert_between_files_and_list_weights_import_no_keras(tmp_path):
    """npz -> timm -> Hugging Face -> npz and `list-weights` run on the formats' tables alone."""
    params = original_npz_params(np.random.default_rng(0), **TINY, classes=5)
    np.savez(tmp_path / "tiny.npz", **params)
    steps = [("tiny.npz", "tiny.safetensors"), ("tiny.safetensors", "hf"), ("hf", "back.npz")]
    for src, dst in steps:
        proc, imported = keras_vit_command("convert", src, dst, "--num-heads", "4", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert imported == {"keras": False, "tensorflow": False}, (src, dst)
    with np.load(tmp_path / "back.npz") as back:
        assert sorted(back.files) == sorted(params)
        for key, value in params.items():
            np.testing.assert_allclose(back[key], value, rtol=0, atol=1e-6, err_msg=key)
    proc, imported = keras_vit_command("list-weights", "ViTB16")
    assert proc.returncode == 0 and "augreg_in21k_ft_in1k_224" in proc.stdout
    assert imported == {"keras": False, "tensorflow": False}


def _help(capsys, *args):
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([*args, "--help"])
    assert exit.value.code == 0
    return capsys.readouterr().out


def test_every_option_shows_what_it_takes(capsys):
    text = _help(capsys, "train")
    assert " VALUE" not in text  # the old placeholder of every option
    for shown in (
        "--optimizer {sgd,adam,adamw,muon,lamb,lion,adafactor}", "--epochs INT", "--clipnorm FLOAT|none", "--flip true|false",
        "--data NAME|DIR|FILE", "--output-dir DIR", "--crop-area MIN,MAX", "--schedule {cosine,linear,constant}",
        "--precision {auto,float32,tf32,mixed_bfloat16,mixed_float16}", "--on-corrupt {skip,error}",
    ):
        assert shown in text, shown
    from keras_vit.weights.formats import export_names

    assert {"npz", "timm", "hf", "keras", "kerashub"} <= set(export_names())
    assert "--format {" + ",".join(export_names()) + "}" in _help(capsys, "convert")
    assert "--model VARIANT|MODEL.keras" in _help(capsys, "predict")


def test_parsed_options_override_the_recipe():
    args = build_parser().parse_args(["train", "--epochs", "3", "--clipnorm", "none", "--flip", "false"])
    assert (args.epochs, args.clipnorm, args.flip) == (3, None, False)
    assert not hasattr(args, "learning_rate")  # not given: the recipe's value stays
    from keras_vit.training import recipe
    from keras_vit.training.commands import config_from_args

    config = config_from_args(args)
    assert (config.epochs, config.clipnorm, config.flip) == (3, None, False)
    assert config.learning_rate == recipe("digits").learning_rate


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--epochs", "x"], "argument --epochs: Bad value for epochs: 'x'"),
        (["train", "--optimizer", "nadam"], "argument --optimizer: invalid choice: 'nadam'"),
        (["train", "--set", "epochs=0"], "keras-vit train: error: epochs=0 must be in [1, 1000000000]."),
        (["train", "--image-size", "100000"], "image_size=100000 must be in [1, 16384]"),
        (["train", "--hidden-dim", "1000000000"], "hidden_dim=1000000000 must be in [1, 262144]"),
        (["train", "--depth", "100000"], "depth=100000 must be in [1, 1024]"),
        (["convert", "a", "b", "--num-heads", "two"], "argument --num-heads: invalid int value: 'two'"),
    ],
)
def test_bad_values_exit_2_before_anything_heavy_is_imported(args, message):
    proc, imported = keras_vit_command(*args, hide_tensorflow=True)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if not line.startswith("IMPORTED ")]  # the harness's own
    assert len(said) == 1, proc.stderr  # one line, not argparse's usage first
    assert imported == {"keras": False, "tensorflow": False}


def test_weights_formats_listed_without_keras_are_the_exporters():
    import keras_vit.weights.export  # noqa: F401
    from keras_vit.weights.formats import FORMATS

    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    choices = next(a.choices for a in subparsers.choices["convert"]._actions if a.dest == "format")
    assert list(choices) == [f.option for f in FORMATS if f.write] == list(sys.modules["keras_vit.weights.export"].FORMATS)


def test_lazy_packages_bind_what_an_eager_import_would():
    import keras_vit.weights.export  # the sub-module shares its name with the function

    assert callable(keras_vit.weights.export) and keras_vit.weights.export.__name__ == "export"
    assert {"train", "recipe", "RECIPES"} <= set(dir(keras_vit.training))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        keras_vit.applications.nope


def test_fit_prints_a_bar_on_a_terminal_and_lines_in_a_log(monkeypatch):
    from keras_vit.training.engine import fit_verbosity

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert fit_verbosity("auto") == 1
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert fit_verbosity("auto") == 2 and fit_verbosity(0) == 0


def test_train_logged_to_a_pipe_is_quiet_and_one_line_per_epoch(tmp_path):
    """No TensorFlow / absl start-up lines (`TF_CPP_MIN_LOG_LEVEL` unset) and no redrawn bar."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    flags = [
        "--image-size", "8", "--patch-size", "2", "--hidden-dim", "16", "--depth", "1", "--num-heads", "2",
        "--mlp-dim", "32", "--epochs", "2", "--tensorboard", "false", "--output-dir", str(tmp_path / "run"),
    ]
    proc, _ = keras_vit_command("train", *flags, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "I0000" not in log and "absl::InitializeLog" not in log and "cpu_feature_guard" not in log
    assert "\r" not in log and "\b" not in log and "━" not in log
    epochs = re.findall(r"^\d+/\d+ - .* - val_accuracy: ", proc.stdout, re.M)
    assert len(epochs) == 2, proc.stdout
    assert len(proc.stdout) < 2000
    assert "Logs: " in proc.stdout and "TensorBoard" not in proc.stdout  # --tensorboard false: no folder to name


@pytest.mark.skipif(BACKEND != "torch", reason="the ONNX export always runs in a PyTorch process")
def test_onnx_export_of_an_any_size_model_runs_at_other_sizes(tmp_path):
    import onnxruntime

    from keras_vit.inference import serving as export_lib

    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(None, None, 3), classes=5,
        classifier_activation=None,
    )
    head = np.random.default_rng(0).normal(size=(32, 5)).astype("float32")
    model.get_layer("head").set_weights([head, np.zeros(5, "float32")])  # the builder's head is zero
    error = export_lib.export(model, "onnx", str(tmp_path / "vit.onnx"))  # checked at 2 sizes
    assert error < 1e-4
    session = onnxruntime.InferenceSession(str(tmp_path / "vit.onnx"), providers=["CPUExecutionProvider"])
    for shape in [(12, 20, 3), (32, 16, 3)]:  # neither of the sizes it was traced and checked at
        images = export_lib.sample_images(model, count=2, seed=1, shape=shape)
        got = session.run(None, {session.get_inputs()[0].name: images})[0]
        expected = keras.ops.convert_to_numpy(model(images, training=False))
        assert got.shape == (2, 5)
        np.testing.assert_allclose(got, expected, atol=1e-4)
        assert np.abs(expected).max() > 0.1  # a non-trivial head


def test_every_subcommand_help_needs_neither_keras_nor_tensorflow():
    parser = build_parser()
    names = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices
    assert {"train", "predict", "inspect", "convert", "export"} <= set(names)
    proc, imported = keras_vit_command(commands=[[name, "--help"] for name in names], hide_tensorflow=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in names:
        assert f"usage: keras-vit {name} [-h]" in proc.stdout, name
    assert imported == {"keras": False, "tensorflow": False}


@pytest.mark.skipif(BACKEND == "tensorflow", reason="Keras itself imports TensorFlow on its backend")
def test_predict_and_inspect_run_without_tensorflow(tmp_path):
    """`predict` gives the classes and probabilities of the tf.data validation transform (the
    TensorFlow path it used before) with TensorFlow hidden; `inspect` writes its pictures."""
    import tensorflow as tf

    from keras_vit.data import augment
    from keras_vit.data.sources import decode_image_file

    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=7
    )
    randomize(model, seed=1, scale=0.5).save(tmp_path / "tiny.keras")
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (23, 41, 4), dtype=np.uint8)).save(tmp_path / "a.png")  # RGBA
    Image.fromarray(rng.integers(0, 256, (50, 30, 3), dtype=np.uint8)).save(tmp_path / "b.jpg", quality=90)
    paths = ["a.png", "b.jpg"]
    commands = [
        ["predict", *paths, "--model", "tiny.keras", "--top", "3"],
        ["inspect", *paths, "--model", "tiny.keras", "--out", "figures"],
    ]
    proc, imported = keras_vit_command(commands=commands, hide_tensorflow=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert imported == {"keras": True, "tensorflow": False}
    assert sorted(os.listdir(tmp_path / "figures")) == [
        "attention_rollout.png", "embedding_filters.png", "mean_attention_distance.png",
        "position_embedding_similarity.png",
    ]
    printed = re.findall(r"^  \d\. \d +(\S+)  \(class (\d)\)$", proc.stdout, re.M)
    assert len(printed) == 6, proc.stdout
    before = np.stack([
        augment.scale_to_unit(augment.eval_transform(decode_image_file(tf.constant(str(tmp_path / p)), 0)[0], 16))
        for p in paths
    ])
    for i, probs in enumerate(model.predict(before, verbose=0)):
        top = np.argsort(probs)[::-1][:3]
        assert [int(index) for _, index in printed[3 * i : 3 * i + 3]] == list(top)
        np.testing.assert_allclose([float(p) for p, _ in printed[3 * i : 3 * i + 3]], probs[top], atol=1e-4)


def test_a_missing_backend_says_how_to_install_it(tmp_path):
    """KERAS_BACKEND=tensorflow without TensorFlow installed: one line naming the extra, exit 2."""
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "m.keras").write_bytes(b"")
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    proc, _ = keras_vit_command("predict", "a.png", "--model", "m.keras", hide_tensorflow=True, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("keras-vit predict: error:")]
    assert len(error) == 1, proc.stderr[-3000:]
    assert error[0].startswith("keras-vit predict: error: No module named 'tensorflow"), error
    assert error[0].endswith(
        ": install it with pip install 'keras-vit[tensorflow]', or set KERAS_BACKEND to an installed "
        "backend (tensorflow, jax, torch)"
    ), error
    assert "Traceback" not in proc.stderr


def test_predict_prints_no_tensorflow_start_up_lines_on_any_backend(tmp_path):
    """Keras looks for TensorFlow when it loads a model, whatever the backend: its start-up lines stay hidden."""
    keras_vit.VisionTransformer(patch_size=8, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                input_shape=(16, 16, 3), classes=3).save(tmp_path / "m.keras")
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(tmp_path / "a.png")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc, imported = keras_vit_command("predict", "a.png", "--model", "m.keras", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert imported["tensorflow"]  # so the test checks what it is about
    assert "I0000" not in proc.stderr and "absl::InitializeLog" not in proc.stderr, proc.stderr[-3000:]
