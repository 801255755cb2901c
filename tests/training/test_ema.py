"""Weight EMA (`ema_decay`): the average against NumPy, once per update under gradient
accumulation, never written into the trained weights by `fit`; in a run: validation, best.keras
and the final model on the average, the average resumed from the checkpoint."""

import csv
import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import ema, optim, pretrain, train
from tests.support import JIT
from tests.support.runs import EveryStep, exponential_average, saved_weights, weights_by_path

DECAY = 0.7


def _tiny():
    keras.utils.set_random_seed(1)
    return keras_vit.VisionTransformer(2, 16, 1, 2, 32, input_shape=(8, 8, 3), classes=10, classifier_activation=None)


def _trainable(model):
    return [np.array(keras.ops.convert_to_numpy(w)) for w in model.trainable_weights]


@pytest.mark.parametrize("accumulation", [1, 3])
def test_the_average_moves_once_per_update_and_fit_leaves_the_trained_weights(rng, accumulation):
    updates, micro = 4, 2
    x = rng.uniform(-1, 1, (updates * accumulation * micro, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 10, len(x))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def compiled(ema_decay):
        model = _tiny()
        opt = optim.build_optimizer("sgd", 0.1, momentum=0.9, accumulation_steps=accumulation, ema_decay=ema_decay)
        model.compile(opt, loss, jit_compile=JIT)
        return model

    plain = compiled(0.0)  # the reference: the trained weights after each update, no EMA
    after_update = []
    for i in range(0, len(x), micro):
        plain.train_on_batch(x[i:i + micro], y[i:i + micro])
        if (i // micro + 1) % accumulation == 0:
            after_update.append(_trainable(plain))
    averaged = compiled(DECAY)
    averaged.fit(x, y, batch_size=micro, epochs=1, shuffle=False, verbose=0)
    trained = _trainable(averaged)
    for got, want in zip(trained, after_update[-1]):  # EMA changes no update; fit wrote no average in
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    expected = [exponential_average(values, DECAY) for values in zip(*after_update)]
    assert max(np.abs(e - w).max() for e, w in zip(expected, after_update[-1])) > 1e-3  # not trivially equal
    with ema.averaged(averaged):
        for got, want in zip(_trainable(averaged), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(_trainable(averaged), trained):  # back to the trained weights, exactly
        np.testing.assert_array_equal(got, want)
    ema.use_average(averaged)
    for got, want in zip(_trainable(averaged), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _digits(count=400):
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return (bunch.images[:count] * (255 / 16)).astype("uint8"), bunch.target[:count]


# 320 training digits of 8x8: 5 steps of 64 per epoch; a reproducible input stream
RUN = dict(
    image_size=8, patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, batch_size=64,
    reference_batch_size=64, learning_rate=0.05, warmup_steps=0, val_fraction=0.2, epochs=2, checkpoint_every=3,
    deterministic=True, tensorboard=False, verbose=0, jit_compile=JIT, ema_decay=DECAY,
)


def _assert_close(got, want, atol=1e-5):
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=atol, err_msg=path)


def test_a_run_saves_the_average_and_resumes_it(tmp_path):
    data = _digits()
    whole_steps = EveryStep()
    whole = train("digits", data=data, output_dir=str(tmp_path / "whole"), callbacks=[whole_steps], **RUN)
    assert whole.steps == 10 and len(whole_steps.steps) == 10
    trainable = whole_steps.steps[0].keys()

    def average_after(step):
        return {path: exponential_average([s[path] for s in whole_steps.steps[:step]], DECAY) for path in trainable}

    final = saved_weights(whole.final_path)
    _assert_close({p: final[p] for p in trainable}, average_after(10))
    best = saved_weights(whole.best_path)
    _assert_close({p: best[p] for p in trainable}, average_after(5 * whole.best_epoch))
    # the returned model: best.keras, the average
    returned = weights_by_path(whole.model)
    _assert_close({p: returned[p] for p in trainable}, average_after(5 * whole.best_epoch))
    with open(tmp_path / "whole" / "log.csv") as handle:  # validated on the average: the best epoch's figure
        rows = list(csv.DictReader(handle))                 # is that of best.keras
    np.testing.assert_allclose(float(rows[whole.best_epoch - 1]["val_loss"]), whole.val_loss, rtol=1e-4)

    killed = EveryStep(kill_after=8)  # the state of step 6 was saved
    with pytest.raises(KeyboardInterrupt):
        train("digits", data=data, output_dir=str(tmp_path / "resumed"), callbacks=[killed], **RUN)
    with open(tmp_path / "resumed" / "checkpoint" / "state.json") as handle:
        assert json.load(handle)["step"] == 6
    resumed = train("digits", data=data, output_dir=str(tmp_path / "resumed"), **RUN)
    assert resumed.resumed_from == 6
    _assert_close(saved_weights(resumed.final_path), final)
    _assert_close(saved_weights(resumed.best_path), best)
    with pytest.raises(ValueError, match=r"different settings \(ema_decay: 0\.7 -> 0\.9\)"):
        train("digits", data=data, output_dir=str(tmp_path / "resumed"), **{**RUN, "ema_decay": 0.9})


def test_pretraining_saves_the_average_encoder(tmp_path):
    steps = EveryStep()
    result = pretrain("masked_patch_digits", data=_digits(200), output_dir=str(tmp_path), callbacks=[steps],
                      **{**RUN, "steps": 4, "val_fraction": 0.36, "checkpoint_every": 0})
    encoder = saved_weights(result.encoder_path)
    recorded = {path: path for path in steps.steps[0] if path in encoder}
    assert len(recorded) == len(encoder)  # every encoder weight trains
    average = {path: exponential_average([s[path] for s in steps.steps], DECAY) for path in recorded}
    _assert_close(encoder, average)
    assert max(np.abs(encoder[p] - steps.steps[-1][p]).max() for p in recorded) > 1e-3  # not the last weights
    assert os.path.exists(os.path.join(str(tmp_path), "best.keras"))
