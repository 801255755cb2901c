"""`optimizer="muon"`: Keras' Muon for the hidden kernels, its AdamW step for the rest (the split
Keras and timm use), two updates against NumPy, and a run resumed from its checkpoint exactly."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.training import optim, recipe, train
from tests.support import JIT
from tests.support.runs import EveryStep, saved_weights

HIDDEN = {f"encoder/encoderblock_0/{name}/kernel"
          for name in ("attention/qkv", "attention/out", "mlp/dense_0", "mlp/dense_1")}
LR, MOMENTUM, BETAS, DECAY = 0.05, 0.9, (0.8, 0.95), 0.1


def _tiny():
    keras.utils.set_random_seed(3)
    return keras_vit.VisionTransformer(2, 16, 1, 2, 32, input_shape=(8, 8, 3), classes=10, representation_size=8,
                                       classifier_activation=None)


def _muon():
    return optim.build_optimizer("muon", LR, momentum=MOMENTUM, beta_1=BETAS[0], beta_2=BETAS[1],
                                 weight_decay=DECAY, clipnorm=None)


def test_muon_takes_the_hidden_kernels_and_adamw_the_rest():
    model = _tiny()
    optimizer = _muon()
    optimizer.build(model.trainable_variables)
    adamw = {v.path for v, velocity in zip(model.trainable_variables, optimizer.adam_velocities)
             if velocity is not None}
    assert {v.path for v in model.trainable_variables} - adamw == HIDDEN
    # 2-D output layers by name: the heads (classifier, pre-logits, masked patch prediction)
    head = keras.layers.Dense(4, name="prediction_head")
    head.build((None, 8))
    assert optimizer._should_use_adamw(head.kernel) and {"head/kernel", "pre_logits/kernel"} <= adamw


def _newton_schulz(update, steps=5, coefficients=(3.4445, -4.7750, 2.0315)):
    """The quintic Newton-Schulz orthogonalisation of Muon (Keller Jordan's), in float64."""
    a, b, c = coefficients
    tall = update.shape[0] > update.shape[1]
    x = update.T if tall else update
    x = x / (np.linalg.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def test_two_muon_updates_match_numpy(rng):
    model = _tiny()
    optimizer = _muon()
    variables = model.trainable_variables
    weights = {v.path: np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in variables}
    state = {v.path: [np.zeros(v.shape), np.zeros(v.shape)] for v in variables}  # momentum, velocity
    for step in (1, 2):
        grads = [rng.normal(size=v.shape).astype("float32") for v in variables]
        optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)
        for variable, grad in zip(variables, grads):
            path, w, (m, v) = variable.path, weights[variable.path], state[variable.path]
            if not path.endswith(optim.NO_DECAY):  # decoupled decay first, at the step's rate
                w = w - w * DECAY * LR
            if path in HIDDEN:  # Nesterov momentum, orthogonalised, RMS-matched to AdamW (Moonlight: 0.2 sqrt(max dim))
                m = MOMENTUM * m + grad
                w = w - LR * 0.2 * np.sqrt(max(w.shape)) * _newton_schulz(grad + MOMENTUM * m)
            else:
                m = BETAS[0] * m + (1 - BETAS[0]) * grad
                v = BETAS[1] * v + (1 - BETAS[1]) * grad.astype(np.float64) ** 2
                alpha = LR * np.sqrt(1 - BETAS[1] ** step) / (1 - BETAS[0] ** step)
                w = w - alpha * m / (np.sqrt(v) + 1e-7)
            weights[path], state[path] = w, [m, v]
    for variable in variables:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(variable), weights[variable.path], rtol=1e-4, atol=2e-6,
                                   err_msg=variable.path)


def _digits(count=160):
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return (bunch.images[:count] * (255 / 16)).astype("uint8"), bunch.target[:count]


# 128 training digits of 8x8: 4 steps of 32 (one epoch), a state saved every 2 steps
RUN = dict(
    image_size=8, patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=32, epochs=1,
    optimizer="muon", learning_rate=0.02, weight_decay=0.05, warmup_steps=1, drop_path=0.0, val_fraction=0.2,
    checkpoint_every=2, deterministic=True, tensorboard=False, verbose=0, jit_compile=JIT,
)


def test_a_muon_run_resumes_its_optimizer_state_exactly(tmp_path):
    data = _digits()
    whole = train("digits", data=data, output_dir=str(tmp_path / "whole"), **RUN)
    assert whole.steps == 4
    killed = EveryStep(kill_after=3)  # the state of step 2 was saved (and confirmed by step 3's loss)
    with pytest.raises(KeyboardInterrupt):
        train("digits", data=data, output_dir=str(tmp_path / "resumed"), callbacks=[killed], **RUN)
    with open(tmp_path / "resumed" / "checkpoint" / "state.json") as handle:
        assert json.load(handle)["step"] == 2
    resumed = train("digits", data=data, output_dir=str(tmp_path / "resumed"), **RUN)
    assert resumed.resumed_from == 2
    want, got = saved_weights(whole.final_path), saved_weights(resumed.final_path)
    assert got.keys() == want.keys()
    for path in want:  # Muon's momenta and the AdamW moments came back: the same 4 updates, bit for bit
        np.testing.assert_array_equal(got[path], want[path], err_msg=path)


def test_muon_on_the_command_line_and_its_refusal_of_layer_decay(capsys):
    assert recipe("digits").override(["optimizer=muon"]).optimizer == "muon"
    assert main(["train", "--optimizer", "muon", "--layer-decay", "0.7", "--steps", "1"]) == 2
    error = capsys.readouterr().err.strip()
    assert "layer_decay works with every optimizer but muon" in error and "\n" not in error
