"""`keras_vit.training.train` end to end on tiny models: accuracy, bf16, resume, NaN, accumulation."""

import json
import math
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.utils import files
from keras_vit.training import TrainingDiverged, optim, recipe, train
from tests.support import JIT

# A tiny ViT on the 8x8 digits themselves: 16 tokens of 2x2 pixels, width 48, depth 2, no
# augmentation or regularisation (fast to fit).
TINY = dict(
    image_size=8, patch_size=2, hidden_dim=48, depth=2, num_heads=3, mlp_dim=96,
    batch_size=64, learning_rate=1e-2, warmup_steps=10, weight_decay=0.0, drop_path=0.0, label_smoothing=0.0,
    crop_area=(1.0, 1.0), crop_aspect=(1.0, 1.0), tensorboard=False, verbose=0,
    # XLA compilation costs TensorFlow more than these few steps gain; JAX always compiles.
    jit_compile=JIT,
)


def _small_digits():
    """400 digits as arrays: 320 for training (5 steps of 64), 80 held out."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return (bunch.images[:400] * (255 / 16)).astype("uint8"), bunch.target[:400]


STEPS_PER_EPOCH = 5


def _config(tmp_path, **overrides):
    return recipe("digits", **{**TINY, "output_dir": str(tmp_path / "run"), **overrides})


class Recorder(keras.callbacks.Callback):
    """Records epochs begun, and optionally raises (a crash) after a given epoch or step."""

    def __init__(self, crash_after_epoch=None, crash_after_step=None):
        super().__init__()
        self.crash_after_epoch, self.crash_after_step = crash_after_epoch, crash_after_step
        self.epochs, self.steps, self.start_state, self.crash_state = [], 0, None, None

    def _state(self):
        return [np.array(v) for v in self.model.optimizer.variables], [np.array(w) for w in self.model.weights]

    def on_train_begin(self, logs=None):
        if self.start_state is None:
            self.start_state = self._state()

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == self.crash_after_step:
            self.crash_state = self._state()
            raise KeyboardInterrupt("simulated kill")

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.crash_after_epoch:
            self.crash_state = self._state()
            raise KeyboardInterrupt("simulated kill")


def _assert_same_state(a, b):
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        np.testing.assert_array_equal(x, y)


def test_short_fit_on_digits_reaches_80_percent(tmp_path):
    result = train(_config(tmp_path, epochs=8))
    assert result.top1 >= 0.80, result.history["val_accuracy"]
    assert result.top5 >= result.top1 and result.top5 >= 0.98
    assert os.path.exists(result.best_path) and os.path.exists(result.final_path)
    assert max(result.history["val_accuracy"]) == pytest.approx(result.top1, abs=1e-6)
    # the saved best model reproduces the reported accuracy
    from keras_vit.evaluation.classification import evaluate

    assert evaluate(result.best_path)["top1"] == pytest.approx(result.top1, abs=1e-6)
    with open(os.path.join(result.run_dir, "log.csv")) as handle:
        assert len(handle.read().strip().splitlines()) == 1 + 8


def test_mixed_bfloat16_fit_on_cpu(tmp_path):
    result = train(_config(tmp_path, epochs=1, depth=1, precision="mixed_bfloat16", val_fraction=0.2), data=_small_digits())
    assert result.precision == "mixed_bfloat16" and np.isfinite(result.history["loss"]).all()
    model = keras.saving.load_model(result.final_path)
    assert model.get_layer("embedding").compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in model.weights)
    outputs = model(np.zeros((2, 8, 8, 3), "float32"))
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(outputs).sum(axis=1), 1.0, atol=1e-5)
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored


def test_resume_after_crashes_at_an_epoch_end_and_mid_epoch(tmp_path):
    config = _config(tmp_path, epochs=3, depth=1, checkpoint_every=3, val_fraction=0.2)
    data = _small_digits()
    # 1. killed right after epoch 1 (of 0..2) ended: the restart begins epoch 1 with the exact
    #    weights and optimizer state the killed run had
    first = Recorder(crash_after_epoch=0)
    with pytest.raises(KeyboardInterrupt):
        train(config, data=data, callbacks=[first])
    # 2. killed at step 8, in the middle of epoch 2: the state of step 6 was saved
    second = Recorder(crash_after_step=3)
    with pytest.raises(KeyboardInterrupt):
        train(config, data=data, callbacks=[second])
    assert second.epochs == [1]
    _assert_same_state(first.crash_state, second.start_state)  # weights and optimizer variables
    with open(os.path.join(config.run_dir, "checkpoint", "state.json")) as handle:
        assert json.load(handle)["step"] == 6
    # 3. the restart finishes the run from step 6: the rest of epoch 2 (index 1), then epoch 3
    third = Recorder()
    result = train(config, data=data, callbacks=[third])
    assert result.resumed_from == 6 and result.steps == 3 * STEPS_PER_EPOCH
    assert third.steps == 3 * STEPS_PER_EPOCH - 6 and third.epochs == [1, 2]
    assert int(third.start_state[0][0]) == 6  # the optimizer's step counter came back
    with open(os.path.join(result.run_dir, "log.csv")) as handle:
        epochs = [line.split(",")[0] for line in handle.read().strip().splitlines()[1:]]
    assert epochs == ["0", "1", "2"]
    with pytest.raises(ValueError, match=r"different settings.*batch_size.*\(or resume=False\)\.$"):
        train(config.replace(batch_size=32), data=data)


def test_nan_loss_stops_with_a_clear_message(tmp_path):
    config = _config(tmp_path, epochs=2, depth=1, optimizer="sgd", learning_rate=1e12, clipnorm=None, momentum=0.0, warmup_steps=0)
    expected = "loss became (nan|inf).*No good state had been saved yet.*learning rate"
    with pytest.raises(TrainingDiverged, match=expected) as error:
        train(config, data=_small_digits())
    assert "checkpoint" not in str(error.value)  # names no folder that does not exist
    state = os.path.join(config.run_dir, "checkpoint", "state.json")
    assert not os.path.exists(state)  # no diverged state was saved


def _finite_weights_file(path):
    import h5py

    arrays = []
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: arrays.append(item[()]) if isinstance(item, h5py.Dataset) else None)
    return bool(arrays) and all(np.isfinite(a).all() for a in arrays if np.issubdtype(np.asarray(a).dtype, np.floating))


def test_after_a_nan_a_sane_rerun_resumes_from_the_last_finite_state(tmp_path):
    """A state becomes the one to resume from only once a finite loss was computed from its weights."""
    data = _small_digits()
    sane = _config(tmp_path, epochs=3, depth=1, val_fraction=0.2, warmup_steps=0)  # AdamW, lr 0.01
    with pytest.raises(KeyboardInterrupt):  # epoch 1 trained and saved (step 5), then killed
        train(sane, data=data, callbacks=[Recorder(crash_after_epoch=0)])
    # resumed with a wild learning rate, saving every step: step 6's update blows the weights up,
    # step 7's loss is NaN; the state saved after step 6 never gave a finite loss
    with pytest.raises(TrainingDiverged, match="loss became nan at epoch 2, batch 2") as error:
        train(sane.replace(learning_rate=1e30, checkpoint_every=1), data=data)
    named = re.search(r"The last good state \(step 5\) is (\S+\.weights\.h5):", str(error.value)).group(1)
    assert os.path.isfile(named) and _finite_weights_file(named)
    assert sorted(os.listdir(os.path.dirname(named))) == ["state.json", "step-5.weights.h5"]
    result = train(sane, data=data)  # a sane learning rate again: resumes and trains
    assert result.resumed_from == 5 and result.steps == 3 * STEPS_PER_EPOCH
    assert np.isfinite(result.history["loss"] + result.history["val_loss"]).all()
    assert result.history["loss"][-1] < result.history["loss"][0]  # and it learns


@pytest.mark.backend_independent  # file modes and leftovers of the run folder (plain Python)
def test_run_folder_files_have_normal_permissions_and_no_leftovers(tmp_path):
    config = _config(tmp_path, epochs=1, depth=1, val_fraction=0.2, checkpoint_every=2)
    checkpoint = os.path.join(config.run_dir, "checkpoint")
    os.makedirs(checkpoint)
    files.write_json(os.path.join(config.run_dir, "config.json"), config.to_dict())  # written when it started
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = [  # what a run killed while saving leaves behind
        os.path.join(checkpoint, f"{files.TMP_PREFIX}{int(dead.stdout)}-abcd1234.step-4.weights.h5"),
        os.path.join(config.run_dir, f"{files.TMP_PREFIX}{int(dead.stdout)}-abcd1234.best.keras"),
        os.path.join(checkpoint, "step-4.weights.h5"),  # saved, but killed before any loss confirmed it
    ]
    for path in stale:
        open(path, "w").close()
    old = os.umask(0o022)
    try:
        train(config, data=_small_digits())
    finally:
        os.umask(old)
    assert sorted(os.listdir(checkpoint)) == ["state.json", "step-5.weights.h5"]
    written = ["best.keras", "checkpoint", "classes.json", "config.json", "final.keras", "log.csv"]
    assert sorted(os.listdir(config.run_dir)) == written
    for root, folders, names in os.walk(config.run_dir):
        assert oct(os.stat(root).st_mode & 0o777) == oct(0o755), root
        for name in names:
            assert oct(os.stat(os.path.join(root, name)).st_mode & 0o777) == oct(0o644), name


def test_gradient_accumulation_equals_one_large_batch(rng):
    x = rng.uniform(-1, 1, (16, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 10, 16)
    head = rng.normal(0, 0.5, (16, 10)).astype("float32")  # non-zero: every weight gets a gradient

    def run(batch_size, accumulation):
        keras.utils.set_random_seed(1)
        model = keras_vit.VisionTransformer(2, 16, 1, 2, 32, input_shape=(8, 8, 3), classes=10, classifier_activation=None)
        model.get_layer("head").kernel.assign(head)
        initial = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
        opt = optim.build_optimizer("sgd", 0.1, momentum=0.9, clipnorm=0.5, accumulation_steps=accumulation)
        model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=TINY["jit_compile"])
        model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        final = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
        return initial, final, int(opt.iterations)

    initial, big, big_steps = run(8, 1)  # 2 updates on batches of 8
    _, small, small_steps = run(2, 4)  # 2 updates, each of 4 accumulated micro-batches of 2
    assert big_steps == small_steps == 2
    for a, b in zip(big, small):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    # not trivially equal: every weight moved far more than the tolerance
    assert min(np.max(np.abs(a - b)) for a, b in zip(big, initial)) > 1e-4


class UpdateLearningRates(keras.callbacks.Callback):
    """The learning rate of each optimizer update: read before the micro-batch that completes it."""

    def __init__(self, accumulation):
        super().__init__()
        self.accumulation, self.micro_batches, self.rates = accumulation, 0, []

    def on_train_batch_begin(self, batch, logs=None):
        self.micro_batches += 1
        if self.micro_batches % self.accumulation == 0:
            self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def test_accumulation_follows_the_learning_rate_curve_of_one_large_batch(tmp_path):
    """Global batch 64 in one step or in 4 micro-batches of 16: the same warm-up + cosine curve,
    update by update (10 updates: 3 of warm-up, 7 of cosine decay)."""
    peak, warmup, updates = TINY["learning_rate"], 3, 2 * STEPS_PER_EPOCH
    expected = [peak * (n + 1) / warmup for n in range(warmup)]
    expected += [0.5 * peak * (1 + math.cos(math.pi * (n - warmup) / (updates - warmup))) for n in range(warmup, updates)]
    for accumulation in (1, 4):
        recorder = UpdateLearningRates(accumulation)
        config = _config(tmp_path / str(accumulation), epochs=2, depth=1, warmup_steps=warmup, val_fraction=0.2,
                         accumulation_steps=accumulation)
        result = train(config, data=_small_digits(), callbacks=[recorder])
        assert result.steps == updates * accumulation
        np.testing.assert_allclose(recorder.rates, expected, rtol=1e-5, atol=1e-9, err_msg=f"accumulation {accumulation}")


def test_scratch_recipe_trains_with_its_mixup_and_cutmix(tmp_path):
    """The `scratch` recipe (MixUp 0.8, CutMix 1.0, RandAugment, label smoothing) trains on every backend."""
    tiny = dict(image_size=8, model="custom", patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=16,
                batch_size=32, reference_batch_size=32, steps=3, warmup_steps=1, eval_crop=1.0, tensorboard=False,
                verbose=0, jit_compile=TINY["jit_compile"], output_dir=str(tmp_path / "run"))
    config = recipe("scratch", **tiny)
    assert config.mixup > 0 and config.cutmix > 0 and config.randaugment_ops > 0
    x, y = _small_digits()
    result = train(config, data=(np.repeat(x[..., None], 3, axis=-1), y))
    assert result.steps == 3 and np.isfinite(result.history["loss"]).all()


def test_steps_n_runs_n_steps_and_resumes_through_the_short_last_epoch(tmp_path):
    """`steps=11` on 5 batches an epoch: epochs of 6 and 5 steps (it ran 12, rounded up to whole epochs);
    killed in the second epoch, the rerun ends at step 11."""
    config = _config(tmp_path, steps=11, depth=1, val_fraction=0.2)
    data = _small_digits()
    with pytest.raises(KeyboardInterrupt):
        train(config, data=data, callbacks=[Recorder(crash_after_step=8)])
    rest = Recorder()
    result = train(config, data=data, callbacks=[rest])
    assert result.resumed_from == 6 and result.steps == 11 and rest.steps == 5 and rest.epochs == [1]


def test_arrays_given_in_python_train_in_their_own_default_folder(tmp_path, monkeypatch):
    """`train("digits", data=(x, y))` wrote to runs/digits, the command line's run: after one, a SettingsChanged."""
    monkeypatch.chdir(tmp_path)
    config = recipe("digits", **{**TINY, "steps": 1, "depth": 1})
    result = train(config, data=_small_digits())
    assert os.path.abspath(result.run_dir) == str(tmp_path / "runs" / "digits-arrays")
    assert not (tmp_path / "runs" / "digits").exists()
