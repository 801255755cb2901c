"""`keras-vit train / evaluate / predict / export` and the serving exports."""

import os
import re

import keras
import numpy as np
import pytest
from PIL import Image

from keras_vit.cli import main
from keras_vit.inference import serving as export_lib
from tests.support.commands import TINY_TRAIN_FLAGS



@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of `keras-vit train` on digits with a tiny model: (run dir, captured stdout)."""
    run_dir = (tmp_path_factory.mktemp("cli") / "run").resolve()
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "--output-dir", str(run_dir), *TINY_TRAIN_FLAGS]) == 0
    return run_dir, out.getvalue()


def test_train_reports_metrics_and_where_the_model_is(trained):
    run_dir, output = trained
    assert f"Saved the best model to {run_dir}/best.keras" in output
    assert re.search(r"Validation top-1 0\.\d{4}, top-5 0\.\d{4}", output)
    for name in ("best.keras", "final.keras", "log.csv", "config.json", "classes.json"):
        assert os.path.exists(run_dir / name), name


def test_resume_with_other_settings_names_the_command_line_way_out(trained, capsys):
    run_dir, _ = trained
    assert main(["train", "--output-dir", str(run_dir), *TINY_TRAIN_FLAGS, "--batch-size", "32"]) == 2
    error = capsys.readouterr().err
    assert "different settings (batch_size: 64 -> 32)" in error and error.count("\n") == 1
    assert "--fresh" in error and "--output-dir" in error and "resume=False" not in error


def test_a_rerun_says_how_many_steps_it_ran(trained, capsys):
    """A resumed run's summary claimed all its steps ran in this process."""
    run_dir, output = trained
    done = int(re.search(r"; (\d+) steps in ", output).group(1))
    flags = [*TINY_TRAIN_FLAGS, "--output-dir", str(run_dir)]
    assert main(["train", *flags]) == 0  # the same run again: nothing left to do
    assert f"; 0 steps (resumed at step {done} of {done}) in " in capsys.readouterr().out


def test_evaluate_matches_training(trained, capsys):
    run_dir, output = trained
    top1 = re.search(r"Validation top-1 (0\.\d{4})", output).group(1)
    assert main(["evaluate", str(run_dir / "best.keras")]) == 0
    assert f"on 359 validation examples: top-1 {top1}" in capsys.readouterr().out


def test_predict_prints_top5_with_labels(trained, tmp_path, capsys):
    from sklearn.datasets import load_digits

    run_dir, _ = trained
    digit = (load_digits().images[0] * 255 / 16).astype("uint8")
    Image.fromarray(np.kron(digit, np.ones((4, 4), "uint8"))).save(tmp_path / "zero.png")  # 32x32 grey
    assert main(["predict", str(tmp_path / "zero.png"), "--model", str(run_dir / "best.keras")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].endswith("zero.png") and len(lines) == 6
    probabilities = [float(line.split()[2]) for line in lines[1:]]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1.0001
    assert all(re.match(r"\s+\d\. \d\s", line) for line in lines[1:])  # class names "0".."9"
    (tmp_path / "bad.png").write_bytes(b"not an image")
    assert main(["predict", str(tmp_path / "bad.png"), "--model", str(run_dir / "best.keras")]) == 2
    assert "not a readable" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "zero.png"), "--model", str(run_dir / "best.keras"), "--top", "20"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 1 + 10  # every class, not more
    for top in ("-1", "0"):
        assert main(["predict", str(tmp_path / "zero.png"), "--model", str(run_dir / "best.keras"), "--top", top]) == 2
        assert f"top={top} must be a whole number >= 1" in capsys.readouterr().err


def test_train_from_pretrained_weights_starts_from_them(trained, tmp_path, capsys):
    """`--weights` goes through the builders' `weights=`: with lr 0 the model is the checkpoint."""
    run_dir, output = trained
    top1 = re.search(r"Validation top-1 (0\.\d{4})", output).group(1)
    flags = [*TINY_TRAIN_FLAGS, "--weights", str(run_dir / "best.keras"), "--learning-rate", "0"]
    assert main(["train", "--output-dir", str(tmp_path / "ft"), *flags]) == 0
    assert f"Validation top-1 {top1}" in capsys.readouterr().out


# `export`'s default formats from one run: the others hand the file whole to TensorFlow's and
# PyTorch's processes; each backend's own writers are checked in tests/inference.
@pytest.mark.backends("torch")
def test_export_saved_model_and_onnx_match_the_model(trained, tmp_path, capsys):
    run_dir, _ = trained
    best = str(run_dir / "best.keras")
    assert main(["export", best, "--output", str(tmp_path / "vit")]) == 0
    output = capsys.readouterr().out
    assert output.count("outputs match the Keras model within") == 2
    model = keras.saving.load_model(best)
    images = export_lib.sample_images(model, count=5, seed=1)  # another batch size than checked
    expected = keras.ops.convert_to_numpy(model(images))
    for fmt, path in (("saved_model", "vit.savedmodel"), ("onnx", "vit.onnx")):
        got = export_lib.run_exported(fmt, str(tmp_path / path), images)
        np.testing.assert_allclose(got, expected, atol=1e-4)
    # the check is real: another model's outputs do not pass it
    other = keras.models.clone_model(model)
    for weight in other.trainable_weights:
        weight.assign(np.random.default_rng(0).normal(0, 0.5, weight.shape))
    with pytest.raises(export_lib.ExportMismatch, match="differs from the model"):
        export_lib.verify(other, "onnx", str(tmp_path / "vit.onnx"))


def test_bad_options_are_reported(capsys):
    assert main(["train", "--set", "learning_rat=1"]) == 2
    assert "Unknown training option" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:  # a choice argparse checks before anything is imported
        main(["train", "--strategy", "horovod"])
    assert exit.value.code == 2 and "invalid choice: 'horovod'" in capsys.readouterr().err
    assert main(["train", "--learning-rate", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "keras-vit train: error: learning_rate=-1.0 must be in [0, inf)."
