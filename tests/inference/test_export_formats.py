"""`keras-vit export --format litert | openvino | torch`, and SavedModel from TensorFlow and JAX:
each artefact, run in its own runtime, gives the Keras model's outputs at sizes and batch sizes
it was not traced at; a missing writer is refused in one line; what an export may replace;
quantized exports match the quantized model or are refused in one line."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.inference import serving
from keras_vit.inference.quantization import quantized_copy
from tests.support import BACKEND
from tests.support.models import randomize

NEW_FORMATS = ("litert", "openvino", "torch")
RUNTIMES = {"litert": "ai_edge_litert", "openvino": "openvino", "torch": "torch"}


@pytest.fixture(scope="module")
def any_size_model(tmp_path_factory):
    """A tiny model of any input size (patch 16: a 14 x 14 grid at 224 px) with a non-zero head, saved."""
    model = keras_vit.VisionTransformer(
        patch_size=16, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(None, None, 3), classes=5,
        classifier_activation=None,
    )
    head = np.random.default_rng(0).normal(size=(16, 5)).astype("float32")
    model.get_layer("head").set_weights([head, np.zeros(5, "float32")])
    path = tmp_path_factory.mktemp("model") / "any.keras"
    model.save(path)
    return path


@pytest.mark.backends("tensorflow", "torch")  # JAX hands all three to those backends' processes
def test_litert_openvino_and_torch_exports_match_the_model_at_other_sizes(any_size_model, tmp_path, capsys):
    for name in RUNTIMES.values():
        pytest.importorskip(name)
    out = str(tmp_path / "vit")
    assert main(["export", str(any_size_model), "--format", ",".join(NEW_FORMATS), "--output", out]) == 0
    printed = capsys.readouterr().out
    assert printed.count("outputs match the Keras model within") == 3, printed
    model = keras.saving.load_model(any_size_model)
    for fmt in NEW_FORMATS:
        path = out + serving.SPECS[fmt].suffix
        assert serving.is_export(fmt, path) == (fmt != "litert")
        assert_runs_at_other_sizes(fmt, path, model)
    assert sorted(os.listdir(tmp_path)) == [  # each with its card, no temporary left
        "vit.openvino", "vit.openvino.serving.json", "vit.pt2", "vit.pt2.serving.json", "vit.tflite",
        "vit.tflite.serving.json"]
    assert sorted(os.listdir(out + ".openvino")) == ["keras_vit_export.json", "model.bin", "model.xml"]


def assert_runs_at_other_sizes(fmt, path, model):
    for shape, count in (((48, 80, 3), 5), ((32, 32, 3), 1)):  # neither size nor batch checked at export
        images = serving.sample_images(model, count=count, seed=1, shape=shape)
        expected = serving.keras_outputs(model, images)
        got = serving.run_exported(fmt, path, images)
        assert got.shape == (count, 5)
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=fmt)
        assert np.abs(expected).max() > 0.1  # a non-trivial head


@pytest.mark.skipif(BACKEND == "torch", reason="from PyTorch a TensorFlow process writes it (the TensorFlow run)")
def test_saved_model_of_an_any_size_model_written_here_runs_at_other_sizes(any_size_model, tmp_path, capsys):
    """From JAX, jax2tf traces the height and width as multiples of the patch size (free symbols
    would stop it at the token reshape)."""
    out = str(tmp_path / "vit")
    assert main(["export", str(any_size_model), "--format", "saved_model", "--output", out]) == 0
    assert "outputs match the Keras model within" in capsys.readouterr().out
    assert_runs_at_other_sizes("saved_model", out, keras.saving.load_model(any_size_model))


def test_litert_without_tensorflow_is_refused_in_one_line(any_size_model, tmp_path, capsys, monkeypatch):
    installed = serving._installed
    monkeypatch.setattr(serving, "_installed", lambda name: name != "tensorflow" and installed(name))
    out = tmp_path / "vit.tflite"
    assert main(["export", str(any_size_model), "--format", "litert", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs the package(s) tensorflow" in err and "keras-team/keras#22996" in err
    assert not out.exists()


def test_an_unknown_format_is_refused_in_one_line(any_size_model, tmp_path, capsys):
    assert main(["export", str(any_size_model), "--format", "onnx,tflite", "--output", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("keras-vit export: error: --format onnx,tflite: unknown tflite; expected a comma-separated list "
                   "of saved_model, onnx, litert, openvino, torch, or all.")
    assert os.listdir(tmp_path) == []


def fake_export(fmt):
    """A stand-in for `_write`: the files of `fmt`'s layout, holding 'new'."""

    def write(model, fmt_, output):
        if serving.SPECS[fmt].entries:
            os.makedirs(output)
            output = os.path.join(output, "model.xml")
        if fmt == "torch":  # a zip archive, as torch.export.save writes
            import zipfile

            with zipfile.ZipFile(output, "w") as archive:
                archive.writestr("vit/data/weights", "new")
            return True
        with open(output, "w") as f:
            f.write("new")
        return True

    return write


@pytest.mark.backend_independent  # the command's choice of formats
def test_format_all_writes_every_format(any_size_model, tmp_path, monkeypatch):
    written = []

    def write(model, fmt, output):
        written.append(fmt)
        return fake_export(fmt)(model, fmt, output)

    monkeypatch.setattr(serving, "_write", write)
    monkeypatch.setattr(serving, "_mark", lambda fmt, path: None)
    assert main(["export", str(any_size_model), "--format", "all", "--output", str(tmp_path / "vit"), "--no-verify"]) == 0
    assert written == list(serving.FORMATS)
    assert sorted(os.listdir(tmp_path)) == sorted(f"vit{serving.SPECS[fmt].suffix}{card}" for fmt in serving.FORMATS
                                                  for card in ("", ".serving.json"))


@pytest.mark.parametrize("fmt", NEW_FORMATS)
def test_what_an_export_replaces(fmt, any_size_model, tmp_path, capsys, monkeypatch):
    """An earlier marked export is replaced; an unmarked file of the same name (any LiteRT file)
    only with --overwrite."""
    monkeypatch.setattr(serving, "_write", fake_export(fmt))
    out = tmp_path / f"vit{serving.SPECS[fmt].suffix}"
    argv = ["export", str(any_size_model), "--format", fmt, "--output", str(out), "--no-verify"]
    assert main(argv) == 0
    marked = fmt != "litert"
    assert main(argv) == (0 if marked else 2)
    if not marked:
        assert "already exists; refusing to overwrite it" in capsys.readouterr().err
        assert main([*argv, "--overwrite"]) == 0
    other = tmp_path / f"other{serving.SPECS[fmt].suffix}"
    os.makedirs(other) if serving.SPECS[fmt].entries else other.write_text("not ours")
    assert main(["export", str(any_size_model), "--format", fmt, "--output", str(other), "--no-verify"]) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("fmt, mode", [(fmt, mode) for fmt in NEW_FORMATS for mode in ("int8", "float8", "int4")
                                       if mode not in serving.SPECS[fmt].quantize])
def test_a_quantized_model_a_format_cannot_hold_is_refused_in_one_line(fmt, mode, any_size_model, tmp_path, capsys):
    out = tmp_path / "vit"
    argv = ["export", str(any_size_model), "--format", f"torch,{fmt}", "--output", str(out), "--quantize", mode]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--quantize {mode} cannot be exported as {fmt}: " in err, err
    assert f"{fmt} takes int4; " in err
    assert os.listdir(tmp_path) == []  # refused before any format is written


@pytest.mark.skipif(BACKEND != "tensorflow", reason="LiteRT and OpenVINO are written in-process there; the float "
                    "test checks the other backends' subprocesses")
def test_int4_exports_to_litert_openvino_and_torch_match_the_quantized_model(tmp_path, capsys):
    """Within 1e-4 of the quantized Keras model (the stated tolerance, `--atol`), at a batch size
    other than the one checked; not the float model."""
    for name in RUNTIMES.values():
        pytest.importorskip(name)
    model = randomize(keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(8, 8, 3), classes=5,
        classifier_activation=None), scale=0.1)
    path, out = tmp_path / "float.keras", str(tmp_path / "vit")
    model.save(path)
    assert main(["export", str(path), "--format", ",".join(NEW_FORMATS), "--output", out, "--quantize", "int4"]) == 0
    assert capsys.readouterr().out.count("quantized to int4 as") == 3
    images = serving.sample_images(model, count=5, seed=1)
    quantized = keras.ops.convert_to_numpy(quantized_copy(model, "int4")(images, training=False))
    float_outputs = keras.ops.convert_to_numpy(model(images, training=False))
    for fmt in NEW_FORMATS:
        got = serving.run_exported(fmt, out + serving.SPECS[fmt].suffix, images)
        np.testing.assert_allclose(got, quantized, atol=1e-4, err_msg=fmt)
        assert np.abs(got - float_outputs).max() > 1e-3, fmt  # not the float model
