"""Distillation (`teacher`, `distill`): each mode's loss against NumPy from the saved teacher and
student, the teacher's own resolution and preprocessing, runs that log both losses, kill and
resume, the distillation token's two heads averaged by the saved model, and the refusals."""

import csv
import json
import os
import types

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import recipe, train
from keras_vit.training.distill import distilling_model, load_teacher
from tests.support import JIT
from tests.support.commands import TINY_TRAIN_FLAGS, fails, run_quietly
from tests.support.runs import EveryStep, saved_weights

# Runs of a few steps (compiled on JAX only: `tests.support.JIT`).
FEW_STEPS = ["--steps", "2", "--batch-size", "32", "--val-fraction", "0.05"]
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])  # "dinov3": ImageNet's, bilinear


def _vit(size, width, token=False, preprocessing=None, classes=10, seed=0):
    """A tiny classifier (softmax output) with random heads (the builder's are zeros)."""
    keras.utils.set_random_seed(seed)
    model = keras_vit.VisionTransformer(
        size // 4, width, 1, 2, 2 * width, input_shape=(size, size, 3), classes=classes, distillation_token=token,
        pooling="token", preprocessing=preprocessing)
    rng = np.random.default_rng(seed)
    for name in ("head", "head_dist")[:1 + token]:
        kernel = model.get_layer(name).kernel
        kernel.assign(rng.normal(0, 0.5, kernel.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The teacher (16 px, width 24, ImageNet scaling) and the 32 px students as `.keras` files."""
    folder = tmp_path_factory.mktemp("distill")
    paths = {}
    for name, model in (("teacher", _vit(16, 24, preprocessing="dinov3", seed=1)), ("student", _vit(32, 16)),
                        ("token", _vit(32, 16, token=True, seed=2)), ("teacher8", _vit(8, 16, seed=3)),
                        ("teacher5", _vit(16, 16, classes=5, seed=4))):
        paths[name] = str(folder / f"{name}.keras")
        model.save(paths[name])
    keras.utils.set_random_seed(5)
    paths["tokens"] = str(folder / "tokens.keras")  # no head: its output is the tokens, no pooled feature
    keras_vit.VisionTransformer(4, 16, 1, 2, 32, input_shape=(16, 16, 3), include_top=False).save(paths["tokens"])
    return types.SimpleNamespace(**paths)


def _softmax_log(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _outputs(path, names, images):
    """The saved model's outputs of the layers `names` (their inputs for "head:in") on `images`."""
    model = keras.saving.load_model(path)
    tensors = [model.get_layer(n.split(":")[0]).input if n.endswith(":in") else model.get_layer(n).output for n in names]
    return [np.asarray(o, np.float64) for o in keras.Model(model.inputs, tensors).predict(images, verbose=0)]


CASES = {  # name: (mode, distillation-token student, feature loss)
    "soft": ("soft", False, "mse"), "soft-token": ("soft", True, "mse"), "hard-token": ("hard", True, "mse"),
    "hard": ("hard", False, "mse"), "feature-mse": ("feature", False, "mse"), "feature-cosine": ("feature", False, "cosine"),
}


@pytest.mark.parametrize("case", CASES)
def test_the_loss_of_each_mode_matches_numpy(saved, case):
    mode, token, feature_loss = CASES[case]
    temperature, alpha = 2.0, 0.3
    config = recipe("digits", teacher=saved.teacher, distill=mode, distill_temperature=temperature,
                    distill_alpha=alpha, distill_feature_loss=feature_loss)
    student_path = saved.token if token else saved.student
    model = distilling_model(keras.saving.load_model(student_path), load_teacher(saved.teacher), config, 10)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="sgd")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    y = np.array([0, 3, 7, 9])
    total = model.compute_loss(x, y, model(x), training=True)

    # the teacher's view: 0-255 pixels, 2x2 means (bilinear halving), scaled by its mean / std
    pixels = (x.astype(np.float64) * 127.5 + 127.5).reshape(4, 16, 2, 16, 2, 3).mean((2, 4))
    teacher_images = ((pixels - 255 * MEAN) / (255 * STD)).astype("float32")
    teacher_feature, teacher_logits = _outputs(saved.teacher, ["head:in", "head"], teacher_images)
    if token:
        logits, learner = _outputs(student_path, ["head", "head_dist"], x)
    else:
        feature, logits = _outputs(student_path, ["head:in", "head"], x)
        learner = logits
    label = -_softmax_log(logits)[np.arange(4), y].mean()
    if mode == "soft":
        log_t, log_s = _softmax_log(teacher_logits / temperature), _softmax_log(learner / temperature)
        distill = temperature**2 * (np.exp(log_t) * (log_t - log_s)).sum(-1).mean()
    elif mode == "hard":
        distill = -_softmax_log(learner)[np.arange(4), teacher_logits.argmax(-1)].mean()
    else:
        kernel, bias = (np.asarray(w, np.float64) for w in model.get_layer("distill_projection").get_weights())
        projected = feature @ kernel + bias
        if feature_loss == "mse":
            distill = ((projected - teacher_feature) ** 2).mean()
        else:
            unit = [v / np.linalg.norm(v, axis=-1, keepdims=True) for v in (projected, teacher_feature)]
            distill = (1 - (unit[0] * unit[1]).sum(-1)).mean()
    assert distill > 1e-3
    got = [float(keras.ops.convert_to_numpy(v)) for v in
           (total, model.label_tracker.result(), model.distill_tracker.result())]
    np.testing.assert_allclose(got, [(1 - alpha) * label + alpha * distill, label, distill], rtol=2e-5, atol=1e-6)


def _log(run_dir):
    with open(os.path.join(run_dir, "log.csv")) as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("mode, flags", [("soft", []), ("hard", ["--distillation-token", "true"])])
def test_a_run_logs_both_losses(saved, tmp_path, mode, flags):
    """Feature distillation: `test_a_killed_run_resumes_to_the_uninterrupted_weights`."""
    run_dir = tmp_path / "run"
    argv = ["train", "--output-dir", run_dir, *TINY_TRAIN_FLAGS, *FEW_STEPS, "--pooling", "token",
            "--teacher", saved.teacher, "--distill", mode, *flags]
    code, err = run_quietly(argv)
    assert code == 0, err
    row = _log(run_dir)[-1]
    for name in ("label_loss", "distill_loss", "val_label_loss", "val_distill_loss"):
        assert np.isfinite(float(row[name])), row
    alpha = 0.5
    np.testing.assert_allclose(float(row["val_loss"]),
                               (1 - alpha) * float(row["val_label_loss"]) + alpha * float(row["val_distill_loss"]),
                               rtol=1e-4)
    with open(run_dir / "config.json") as handle:
        assert json.load(handle)["teacher"] == str(saved.teacher)
    final = keras.saving.load_model(run_dir / "final.keras")  # the student alone: no teacher, no projection
    names = {layer.name for layer in final.layers}
    assert not names & {"teacher", "teacher_input", "distill_projection"}
    assert ("head_dist" in names) == (mode == "hard")


def test_the_distillation_token_student_predicts_the_mean_of_its_heads(saved):
    model = keras.saving.load_model(saved.token)
    x = np.random.default_rng(1).uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    head, dist = _outputs(saved.token, ["head", "head_dist"], x)
    assert np.abs(head - dist).max() > 0.1
    want = np.exp(_softmax_log((head + dist) / 2))
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-4, atol=1e-6)


def _digits(count=240):
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = np.repeat((bunch.images[:count] * (255 / 16)).astype("uint8")[..., None], 3, axis=-1)
    return x, bunch.target[:count]


def test_a_killed_run_resumes_to_the_uninterrupted_weights(saved, tmp_path):
    """Feature distillation: the projection is trained state too; the teacher is reloaded."""
    run = dict(image_size=8, patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=32, epochs=2,
               warmup_steps=1, tensorboard=False, verbose=0, deterministic=True, jit_compile=JIT,
               teacher=saved.teacher8, distill="feature", val_fraction=0.2)
    data = _digits()
    whole = train("digits", data=data, output_dir=str(tmp_path / "whole"), **run)
    assert whole.steps == 10
    assert {"label_loss", "distill_loss", "val_label_loss", "val_distill_loss"} <= set(_log(tmp_path / "whole")[-1])
    killed = EveryStep(kill_after=8)  # the state of step 5 (the first epoch's end) was saved
    with pytest.raises(KeyboardInterrupt):
        train("digits", data=data, output_dir=str(tmp_path / "resumed"), callbacks=[killed], **run)
    resumed = train("digits", data=data, output_dir=str(tmp_path / "resumed"), **run)
    assert resumed.resumed_from == 5
    want = saved_weights(whole.final_path)
    for path, value in saved_weights(resumed.final_path).items():
        np.testing.assert_allclose(value, want[path], rtol=1e-5, atol=1e-6, err_msg=path)
    with pytest.raises(ValueError, match=r"different settings.*teacher"):
        train("digits", data=data, output_dir=str(tmp_path / "resumed"), **{**run, "teacher": saved.teacher})


@pytest.mark.backend_independent
@pytest.mark.parametrize("flags, expected", [
    (["--distill", "soft"], "distill needs teacher"),
    (["--teacher", "runs/x"], "teacher needs distill"),
    (["--teacher", "t.keras", "--distill", "soft", "--distill-temperature", "0"], "distill_temperature"),
    (["--teacher", "t.keras", "--distill", "soft", "--distill-alpha", "1.5"], "distill_alpha"),
    (["--teacher", "nowhere/teacher.keras", "--distill", "soft"], "no such file"),
])
def test_bad_options_are_refused_in_one_line(flags, expected, tmp_path, capsys):
    fails(["train", "--output-dir", tmp_path / "run", "--steps", "1", *flags], capsys, expected)
    assert not (tmp_path / "run").exists()


def test_a_teacher_that_does_not_fit_is_refused_before_anything_is_written(saved, tmp_path, capsys):
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("not a model")
    base = ["train", "--output-dir", tmp_path / "run", *TINY_TRAIN_FLAGS, "--steps", "1"]
    fails([*base, "--teacher", not_a_model, "--distill", "soft"], capsys, "is not a model")
    fails([*base, "--teacher", saved.teacher5, "--distill", "hard"], capsys, "teacher predicts 5 classes",
          "the student 10")
    fails([*base, "--teacher", saved.teacher, "--distill", "feature", "--distillation-token", "true", "--pooling",
           "token"], capsys, "use distill=soft or hard")
    fails([*base, "--teacher", saved.tokens, "--distill", "feature"], capsys, "needs the teacher's pooled feature")
    assert not (tmp_path / "run").exists()


def test_the_teacher_computes_in_the_run_precision(saved):
    config = recipe("digits", teacher=saved.teacher, distill="soft")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = distilling_model(keras.saving.load_model(saved.student), load_teacher(saved.teacher), config, 10)
    finally:
        keras.config.set_dtype_policy(previous)
    teacher = model.get_layer("teacher")
    assert teacher.get_layer("encoder").compute_dtype == "bfloat16" and not teacher.trainable_weights
    assert all(v.dtype == "float32" and v.path.startswith("teacher/") for v in teacher.weights)
    assert model.outputs[0].dtype == "float32"


def test_a_checkpoint_file_is_a_teacher(saved, tmp_path):
    """An original-format ViT `.npz` (read by `from_checkpoint`) at 16 px teaches a 32 px student."""
    from tests.support.checkpoints import original_npz_params

    path = str(tmp_path / "teacher.npz")
    np.savez(path, **original_npz_params(np.random.default_rng(0), patch_size=4, depth=1, classes=10))
    config = recipe("digits", teacher=path, distill="soft")
    model = distilling_model(keras.saving.load_model(saved.student), load_teacher(path), config, 10)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    taught = np.asarray(keras.ops.convert_to_numpy(model(x)))[:, 20:]
    halved = x.reshape(2, 16, 2, 16, 2, 3).mean((2, 4))  # its [-1, 1] scaling, at its 16 px
    want = keras_vit.from_checkpoint(path).predict(halved, verbose=0)
    np.testing.assert_allclose(np.exp(_softmax_log(taught.astype(np.float64))), want, rtol=1e-4, atol=1e-6)


def test_the_teacher_sees_the_pixels_behind_the_students_own_scaling(saved):
    """A student fine-tuned at its checkpoint's mean / std (CLIP's): the step scales the batch as
    the student's, and the teacher's input is the same pixels at the teacher's own scaling."""
    from keras_vit.preprocessing import preprocessing

    config = recipe("digits", teacher=saved.teacher, distill="soft")
    model = distilling_model(_vit(16, 16, preprocessing="clip"), load_teacher(saved.teacher), config, 10)
    clip = preprocessing("clip")
    assert model.scaling == clip
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 16, 16, 3))
    images = ((pixels - np.asarray(clip.offset)) / np.asarray(clip.scale)).astype("float32")
    seen = keras.ops.convert_to_numpy(model.get_layer("teacher_input")(images))
    np.testing.assert_allclose(seen, (pixels - 255 * MEAN) / (255 * STD), rtol=1e-4, atol=1e-4)
