"""Layer-wise learning-rate decay: scales per variable, exact steps of every optimizer (AdamW, LAMB, Lion,
Adafactor against NumPy), accumulation."""

import csv
import json

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.layers import ResNetV2Stem
from keras_vit.training import layer_decay, optim, recipe, train
from keras_vit.training.recipes import TrainConfig
from tests.support import JIT, this_backends_share
from tests.support.commands import TINY_TRAIN_FLAGS
from tests.support.models import randomize

DEPTH, DECAY = 2, 0.5
EMBEDDINGS = ("embedding/kernel", "embedding/bias", "class_token/cls", "posembed_input/pos_embedding")


def tiny_vit(**kwargs):
    return keras_vit.VisionTransformer(4, 16, DEPTH, 2, 32, input_shape=(8, 8, 3), classes=3, **kwargs)


def expected_scale(path):
    """BEiT / timm: embeddings decay**(depth + 1), block i decay**(depth - i), the rest 1."""
    if path.startswith(EMBEDDINGS) or path.startswith("stem/"):
        return DECAY ** (DEPTH + 1)
    for i in range(DEPTH):
        if path.startswith(f"encoder/encoderblock_{i}/"):
            return DECAY ** (DEPTH - i)
    return 1.0


def values(variables):
    return [np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in variables]


def test_scales_of_every_variable():
    model = tiny_vit()
    scales = layer_decay.layer_scales(model, DECAY)
    paths = [v.path for v in model.trainable_variables]
    assert set(EMBEDDINGS) <= set(scales) <= set(paths)
    for path in paths:
        assert scales.get(path, 1.0) == expected_scale(path), path
    assert "encoder/encoder_norm/gamma" not in scales and "head/kernel" not in scales
    hybrid = keras_vit.VisionTransformer(
        1, 16, DEPTH, 2, 32, input_shape=(16, 16, 3), classes=3, stem=ResNetV2Stem((1,), width=32)
    )
    hybrid_scales = layer_decay.layer_scales(hybrid, DECAY)
    stem = [v.path for v in hybrid.get_layer("stem").trainable_variables]
    assert stem and all(hybrid_scales[p] == DECAY ** (DEPTH + 1) for p in stem)


def apply_random_steps(optimizer, model, steps, rng):
    """Applies `steps` random gradients; returns the gradients and the variables after each."""
    history, grads = [values(model.trainable_variables)], []
    for _ in range(steps):
        step = [rng.normal(0, 1, v.shape).astype("float32") for v in model.trainable_variables]
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in step], model.trainable_variables)
        grads.append(step)
        history.append(values(model.trainable_variables))
    return grads, history


def test_sgd_step_is_scaled_per_block(rng):
    model = randomize(tiny_vit())
    scales = layer_decay.layer_scales(model, DECAY)
    optimizer = optim.build_optimizer("sgd", 0.1, momentum=0.0, clipnorm=None, lr_scales=scales)
    (grads,), (before, after) = apply_random_steps(optimizer, model, 1, rng)
    for v, g, w0, w1 in zip(model.trainable_variables, grads, before, after):
        np.testing.assert_allclose(w0 - w1, 0.1 * expected_scale(v.path) * g, rtol=1e-5, atol=1e-7, err_msg=v.path)


def rms(x):
    return np.sqrt(np.mean(np.square(x)))


def reference_steps(name, w, grads, rate, wd, decays, b1=0.9):
    """`name`'s weights after `grads`, from the algorithms' papers (decoupled weight decay first,
    as Keras applies it): AdamW, LAMB (You et al.), Lion (Chen et al.: beta_2 0.99), Adafactor
    (Shazeer and Stern: relative step, factored second moments of matrices, update clipping at 1)."""
    m = s = r = c = 0.0
    for t, g in enumerate(grads, 1):
        w = w - w * wd * rate if decays else w
        if name in ("adamw", "lamb"):
            m, s = b1 * m + (1 - b1) * g, 0.999 * s + 0.001 * g * g
            update = m / (1 - b1**t) / (np.sqrt(s / (1 - 0.999**t)) + 1e-7)  # LAMB's (epsilon after the correction)
            if name == "adamw":  # Kingma and Ba's efficient form (epsilon before it), as Keras
                update = np.sqrt(1 - 0.999**t) / (1 - b1**t) * m / (np.sqrt(s) + 1e-7)
            ratio = 1.0
            if name == "lamb" and np.linalg.norm(w) > 0 and np.linalg.norm(update) > 0:
                ratio = np.linalg.norm(w) / np.linalg.norm(update)
            w = w - rate * ratio * update
        elif name == "lion":
            w = w - rate * np.sign(b1 * m + (1 - b1) * g)
            m = 0.99 * m + 0.01 * g
        else:
            decay, square = 1 - t**-0.8, g * g + 1e-30
            if g.ndim >= 2:
                r = decay * r + (1 - decay) * square.mean(-1)
                c = decay * c + (1 - decay) * square.mean(-2)
                v = (r / r.mean(-1, keepdims=True))[..., None] * np.expand_dims(c, -2)
            else:
                s = v = decay * s + (1 - decay) * square
            u = g / np.sqrt(v)
            w = w - max(1e-3, rms(w)) * min(rate, t**-0.5) * u / max(1.0, rms(u))
    return w


@pytest.mark.parametrize("name", ["adamw", "lamb", "lion", "adafactor"])
def test_steps_match_numpy(name, rng):
    """Two steps (the moments matter in the second) against each optimizer's formula in NumPy, with
    the learning rate and the decoupled weight decay both scaled per variable, biases and norms not
    decayed."""
    lr, wd = 0.01, 0.1
    model = randomize(tiny_vit())
    scales = layer_decay.layer_scales(model, DECAY)
    optimizer = optim.build_optimizer(name, lr, weight_decay=wd, clipnorm=None, lr_scales=scales)
    grads, history = apply_random_steps(optimizer, model, 2, rng)
    for k, v in enumerate(model.trainable_variables):
        want = reference_steps(name, history[0][k], [step[k].astype(np.float64) for step in grads],
                               lr * expected_scale(v.path), wd, not v.path.endswith(optim.NO_DECAY))
        np.testing.assert_allclose(history[2][k], want, rtol=2e-5, atol=2e-6, err_msg=f"{name} {v.path}")


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_composes_with_schedule_clipping_and_accumulation(name, rng):
    """One optimizer step of 2 accumulated micro-batches through `fit`, with warm-up schedule and
    clipping, from the same weights with and without layer decay: each variable moves exactly
    `scale` times as far (with the same gradients Adam's moments are the same too)."""
    x = rng.uniform(-1, 1, (8, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 3, 8)

    def moves(decay):
        keras.utils.set_random_seed(1)
        model = randomize(tiny_vit(classifier_activation=None), seed=2)
        lr_scales = None if decay is None else layer_decay.layer_scales(model, decay)
        schedule = optim.WarmupSchedule(0.1, total_steps=10, warmup_steps=5)
        opt = optim.build_optimizer(
            name, schedule, momentum=0.9, weight_decay=0.05, clipnorm=0.5, accumulation_steps=2, lr_scales=lr_scales
        )
        model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=JIT)
        before = values(model.trainable_variables)
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
        return model.trainable_variables, [a - b for a, b in zip(values(model.trainable_variables), before)]

    variables, plain = moves(None)
    _, decayed = moves(DECAY)
    assert min(np.abs(p).max() for p in plain) > 1e-4  # every variable moved
    for v, p, d in zip(variables, plain, decayed):
        np.testing.assert_allclose(d, expected_scale(v.path) * p, rtol=1e-4, atol=1e-7, err_msg=v.path)


def test_train_builds_the_layer_decay_optimizer(tmp_path, rng):
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.append(self.model.optimizer)

    config = recipe(
        "digits", image_size=8, patch_size=4, hidden_dim=16, depth=DEPTH, num_heads=2, mlp_dim=32, batch_size=8,
        steps=1, warmup_steps=0, crop_area=(1.0, 1.0), crop_aspect=(1.0, 1.0), tensorboard=False, verbose=0,
        jit_compile=JIT, output_dir=str(tmp_path / "run"), layer_decay=DECAY,
    )
    data = (rng.integers(0, 256, (24, 8, 8, 3)).astype("uint8"), np.arange(24) % 3)
    result = train(config, data=data, callbacks=[Record()])
    assert isinstance(seen[0], layer_decay.ScaledLearningRates) and result.steps == 1
    assert seen[0].lr_scales == layer_decay.layer_scales(result.model, DECAY)


def test_optimizer_serialises_with_its_scales():
    scales = layer_decay.layer_scales(tiny_vit(), DECAY)
    optimizer = optim.build_optimizer("adamw", 1e-3, weight_decay=0.05, lr_scales=scales)
    copy = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(copy) is type(optimizer) and copy.lr_scales == scales
    assert isinstance(optimizer, keras.optimizers.AdamW)


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, True, "0.7"])
def test_recipe_field_is_validated(bad):
    with pytest.raises(ValueError, match=r"^layer_decay=.* must be a number with 0 < layer_decay <= 1"):
        recipe("finetune", layer_decay=bad)
    assert recipe("finetune", layer_decay=0.75).layer_decay == 0.75
    assert TrainConfig().layer_decay is None
    assert recipe("digits").override(["layer_decay=0.65"]).layer_decay == 0.65


def test_command_line_rejects_bad_decay(capsys):
    assert main(["train", "--layer-decay", "1.5", "--steps", "1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("keras-vit train: error: layer_decay=1.5 must be") and "\n" not in error


def test_layer_decay_needs_a_vit():
    other = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="has no layer 'encoder'"):
        layer_decay.layer_scales(other, DECAY)


@pytest.mark.parametrize("name", this_backends_share(["lamb", "lion", "adafactor"]))  # steps: test_steps_match_numpy
def test_every_optimizer_trains_from_the_command_line(name, tmp_path):
    """`--optimizer` with layer decay and a weight EMA (their subclasses of each optimizer): a run
    completes, its loss finite, and its optimizer is the one named."""
    run_dir = tmp_path / name
    flags = ["--optimizer", name, "--layer-decay", "0.8", "--ema-decay", "0.9", "--weight-decay", "0.05"]
    assert main(["train", "--output-dir", str(run_dir), *TINY_TRAIN_FLAGS, *flags]) == 0
    with open(run_dir / "config.json") as handle:
        assert json.load(handle)["optimizer"] == name
    with open(run_dir / "log.csv") as handle:
        losses = [float(row["loss"]) for row in csv.DictReader(handle)]
    assert losses and np.isfinite(losses).all()
