"""LoRA on the encoder's projections and the linear probe: what trains, the small LoRA file,
merging, saving and resuming."""

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.lora import adapter as lora
from tests.support import JIT
from tests.support.runs import EveryStep, saved_weights

ARCH = dict(patch_size=4, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32)


def tiny(size=16, classes=10):
    return keras_vit.VisionTransformer(**ARCH, input_shape=(size, size, 3), classes=classes, classifier_activation=None)


def run(model, images):
    return keras.ops.convert_to_numpy(model(images, training=False))


def test_lora_trains_low_rank_updates_and_the_head_saves_loads_and_merges(tmp_path):
    base = tiny()
    base_weights = base.get_weights()
    model = tiny()
    model.set_weights(base_weights)
    lora.enable(model, 2, "qkv,mlp")
    trainable = sorted(v.path for v in model.trainable_weights)
    expected = [f"encoder/encoderblock_{i}/{layer}/lora_kernel_{ab}" for i in range(2)
                for layer in ("attention/qkv", "mlp/dense_0", "mlp/dense_1") for ab in "ab"]
    assert trainable == sorted(expected + ["head/kernel", "head/bias"])
    assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == 2 * (2 * (16 + 48) + 2 * (16 + 32) * 2) + 170
    rng = np.random.default_rng(0)
    for variable in model.trainable_weights:  # as after training: B and the head no longer zero
        variable.assign(0.1 * rng.standard_normal(variable.shape).astype("float32"))
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    tuned = run(model, images)
    assert np.abs(tuned - run(base, images)).max() > 1e-3
    path = tmp_path / "lora.npz"
    lora.save(model, path)
    onto_base = tiny()
    onto_base.set_weights(base_weights)
    np.testing.assert_allclose(run(lora.load(onto_base, path), images), tuned, atol=1e-5)
    merged = lora.merged(model)
    assert not any("lora" in v.path for v in merged.weights) and len(merged.weights) == len(base.weights)
    np.testing.assert_allclose(run(merged, images), tuned, atol=1e-5)
    model.save(tmp_path / "model.keras")  # loads as a plain ViT with the update merged
    plain = keras.saving.load_model(tmp_path / "model.keras")
    assert not any("lora" in v.path for v in plain.weights)
    np.testing.assert_allclose(run(plain, images), tuned, atol=1e-5)
    model.save_weights(tmp_path / "state.weights.h5")  # a checkpoint keeps A and B (resume)
    values = model.get_weights()
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, "float32"))
    model.load_weights(tmp_path / "state.weights.h5")
    for got, want in zip(model.get_weights(), values):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="lora_targets='qkv,v'"):
        lora.enable(tiny(), 2, "qkv,v")


@pytest.mark.parametrize("mode", ["lora", "linear_probe"])
def test_training_changes_only_what_the_recipe_trains(mode, tmp_path):
    from keras_vit.training import train

    model = tiny(size=8)
    before = {v.path: keras.ops.convert_to_numpy(v).copy() for v in model.weights}
    options = {"lora_rank": 2} if mode == "lora" else {"linear_probe": True}
    train("digits", model=model, output_dir=str(tmp_path), steps=4, batch_size=32, reference_batch_size=32,
          image_size=8, warmup_steps=0, tensorboard=False, verbose=0, **options)
    changed = {v.path for v in model.weights
               if "lora" not in v.path and not np.array_equal(keras.ops.convert_to_numpy(v), before[v.path])}
    if mode == "lora":  # best weights loaded: the update merged into the kernels of qkv and out
        assert changed - {"head/kernel", "head/bias"} <= {
            f"encoder/encoderblock_{i}/attention/{name}/kernel" for i in range(2) for name in ("qkv", "out")}
        stored = np.load(tmp_path / "lora.npz")
        assert {k for k in stored.files if "lora" in k} == {
            f"encoder/encoderblock_{i}/attention/{name}/lora_kernel_{ab}" for i in range(2) for name in ("qkv", "out")
            for ab in "ab"}
    else:
        assert changed == {"head/kernel", "head/bias"}


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04truncated", "npz without settings"])
def test_a_file_that_is_not_a_lora_file_is_refused_in_one_line(tmp_path, content):
    path = tmp_path / "l.npz"
    if content == "npz without settings":
        np.savez(path, a=np.zeros(2))
    else:
        path.write_bytes(content)
    base = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                       input_shape=(8, 8, 3), classes=3)
    with pytest.raises(ValueError, match="is not a LoRA file written by keras_vit.lora.adapter.save"):
        lora.load(base, str(path))


@pytest.mark.parametrize("mode", ["lora", "linear_probe"])
def test_a_stopped_run_resumed_equals_an_uninterrupted_one(mode, tmp_path):
    """Killed after step 3 (the state of step 2 saved), then resumed: the same files as a run
    never stopped; only the LoRA matrices (merged into qkv / out) or the head changed. The LoRA
    run keeps a weight average too (`ema_decay`): its files hold the average."""
    from keras_vit.training import train

    base = tiny(size=8).get_weights()

    def model():
        fresh = tiny(size=8)
        fresh.set_weights(base)
        return fresh

    options = dict(steps=6, batch_size=32, reference_batch_size=32, image_size=8, warmup_steps=0, checkpoint_every=2,
                   deterministic=True, tensorboard=False, verbose=0, jit_compile=JIT)
    options.update({"lora_rank": 2, "ema_decay": 0.8} if mode == "lora" else {"linear_probe": True})
    whole = train("digits", model=model(), output_dir=str(tmp_path / "whole"), **options)
    with pytest.raises(KeyboardInterrupt):
        train("digits", model=model(), output_dir=str(tmp_path / "resumed"), callbacks=[EveryStep(kill_after=3)],
              **options)
    assert not (tmp_path / "resumed" / "lora.npz").exists()
    resumed = train("digits", model=model(), output_dir=str(tmp_path / "resumed"), **options)
    assert resumed.resumed_from == 2 and resumed.steps == whole.steps == 6
    for name in ("final.keras", "best.keras"):
        got, want = saved_weights(tmp_path / "resumed" / name), saved_weights(tmp_path / "whole" / name)
        assert got.keys() == want.keys()
        for path in want:
            np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-6, err_msg=f"{name}: {path}")
    before = dict(zip((v.path for v in tiny(size=8).weights), base))
    final = saved_weights(tmp_path / "resumed" / "final.keras")
    changed = {path for path, value in final.items() if not np.array_equal(value, before[path])}
    head = {"head/kernel", "head/bias"}
    if mode == "lora":
        assert head < changed <= head | {
            f"encoder/encoderblock_{i}/attention/{name}/kernel" for i in range(2) for name in ("qkv", "out")}
        got, want = np.load(tmp_path / "resumed" / "lora.npz"), np.load(tmp_path / "whole" / "lora.npz")
        assert sorted(got.files) == sorted(want.files) and any("lora_kernel" in name for name in want.files)
        for name in want.files:
            if want[name].dtype.kind == "f":
                np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    else:
        assert changed == head
