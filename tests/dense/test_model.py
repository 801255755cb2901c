"""`keras_vit.DenseModel`: the linear and DPT heads on backbones of every kind of token and
position embedding, the linear head's numbers against NumPy / torch, `.keras` files (here and on
another backend), and bad arguments."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from tests.support import BACKEND
from tests.support.models import randomize

TINY = dict(hidden_dim=16, depth=4, num_heads=2, mlp_dim=32, input_shape=(None, None, 3), include_top=False,
            pooling=None, weights=None)
NECK = dict(neck_hidden_sizes=(8, 8, 16, 16), fusion_hidden_size=8, head_hidden_size=4)
# Class + distillation tokens; LayerScale; rope + registers; no class token (MAP family).
BACKBONES = ("DeiTTi16", "DINOv2S14", "DINOv3S16", "SigLIPB16")
NEXT_BACKEND = {"tensorflow": "jax", "jax": "torch", "torch": "tensorflow"}[BACKEND]
LOAD_AND_PREDICT = """
import sys
import keras, numpy as np
import keras_vit  # registers the layers; no custom_objects needed
folder = sys.argv[1]
for name in ("linear", "dpt"):
    model = keras.saving.load_model(f"{folder}/{name}.keras")
    np.save(f"{folder}/{name}-loaded.npy", model.predict(np.load(f"{folder}/x.npy"), verbose=0))
"""


def run(model, x):
    """`model`'s output for `x`, compiled once per shape (eager JAX compiles every op on its own)."""
    return model.predict(x, verbose=0)


def backbone(name="DINOv2S14", **overrides):
    return randomize(getattr(keras_vit, name)(**{**TINY, **overrides}), seed=len(name))


def patch(model):
    return model.get_layer("embedding").patch_size


@pytest.fixture(scope="module")
def backbones():
    return {name: backbone(name) for name in BACKBONES}


@pytest.mark.parametrize("name", BACKBONES)
def test_heads_on_every_kind_of_backbone_at_two_sizes(backbones, name):
    vit, rng = backbones[name], np.random.default_rng(0)
    p = patch(vit)
    semantic = keras_vit.DenseModel(vit, "dpt", "semantic", num_classes=3, **NECK)
    depth = keras_vit.DenseModel(vit, "linear", "depth", layers=[-2, -1])
    for size in ((2 * p, 3 * p), (3 * p, 3 * p)):
        x = rng.uniform(-1, 1, (2, *size, 3)).astype("float32")
        logits = run(semantic, x)
        assert logits.shape == (2, *size, 3) and np.isfinite(logits).all()
    values = run(depth, x)
    assert values.shape == (2, *size) and (values >= 0).all() and values.max() > 0


def test_a_hybrid_backbone_gives_the_input_size():
    from keras_vit.layers import ResNetV2Stem

    vit = keras_vit.VisionTransformer(1, 16, 2, 2, 32, input_shape=(None, None, 3), include_top=False, pooling=None,
                                      stem=ResNetV2Stem((1, 1), width=32))
    model = keras_vit.DenseModel(vit, "dpt", "depth", layers=[0, 0, 1, 1], fusion_resize="next", head_upsample="input",
                                 **NECK)
    assert run(model, np.zeros((1, 32, 48, 3), "float32")).shape == (1, 32, 48)


def test_dpt_readout_follows_the_class_token(backbones):
    heads = {name: keras_vit.DenseModel(backbones[name], "dpt", "depth", **NECK).get_layer("dpt_head")
             for name in ("DINOv2S14", "SigLIPB16")}
    assert heads["DINOv2S14"].readout == "project" and heads["SigLIPB16"].readout == "ignore"
    assert heads["DINOv2S14"].num_prefix_tokens == 1
    dino3 = keras_vit.DenseModel(backbones["DINOv3S16"], "linear", num_classes=2).get_layer("linear_head")
    assert dino3.num_prefix_tokens == 5  # class + 4 registers


def _torch_resize(x, size):
    import torch

    out = torch.nn.functional.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2), size=size, mode="bilinear",
                                          align_corners=False)
    return out.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("class_token", [False, True])
def test_linear_head_is_batch_norm_and_a_1x1_convolution_resized_to_the_input(class_token):
    vit, rng = backbone(patch_size=8), np.random.default_rng(1)
    model = keras_vit.DenseModel(vit, "linear", "semantic", num_classes=5, layers=[-4, -3, -2, -1],
                                 class_token=class_token)
    head = model.get_layer("linear_head")
    channels = 16 * 4 * (2 if class_token else 1)
    gamma, beta, mean = (rng.standard_normal(channels).astype("float32") for _ in range(3))
    var = rng.uniform(0.5, 2.0, channels).astype("float32")
    kernel, bias = rng.standard_normal((1, 1, channels, 5)).astype("float32"), rng.standard_normal(5).astype("float32")
    head.set_weights([gamma, beta, mean, var, kernel, bias])
    x = rng.uniform(-1, 1, (2, 24, 40, 3)).astype("float32")

    tokens = keras_vit.features(vit, x, layers=[0, 1, 2, 3], norm=True)
    parts = []
    for t in tokens:
        parts.append(t[:, 1:].reshape(2, 3, 5, 16))
        if class_token:
            parts.append(np.broadcast_to(t[:, None, None, 0], (2, 3, 5, 16)))
    features = (np.concatenate(parts, -1) - mean) / np.sqrt(var + 1e-5) * gamma + beta
    want = _torch_resize(np.ascontiguousarray(features @ kernel[0, 0] + bias), (24, 40))
    np.testing.assert_allclose(run(model, x), want, rtol=1e-4, atol=1e-4)


def test_keras_files_load_here_and_on_another_backend(backbones, tmp_path):
    vit = backbones["DINOv2S14"]
    models = {"linear": keras_vit.DenseModel(vit, "linear", num_classes=3, layers=[-2, -1], class_token=True),
              "dpt": keras_vit.DenseModel(vit, "dpt", "depth", **NECK)}
    x = np.random.default_rng(2).uniform(-1, 1, (2, 28, 42, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    for name, model in models.items():
        randomize(model, seed=3)
        model.get_layer(f"{name}_head").set_weights([np.abs(w) + 0.5 if "variance" in v.path else w for v, w in zip(
            model.get_layer(f"{name}_head").weights, model.get_layer(f"{name}_head").get_weights())])
        model.save(tmp_path / f"{name}.keras")
        restored = keras.saving.load_model(tmp_path / f"{name}.keras")
        assert isinstance(restored, keras.Model) and restored.get_layer(f"{name}_head").get_config() == model.get_layer(f"{name}_head").get_config()
        np.testing.assert_allclose(run(restored, x), run(model, x), rtol=1e-6, atol=1e-6, err_msg=name)
    env = {**os.environ, "KERAS_BACKEND": NEXT_BACKEND, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", LOAD_AND_PREDICT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"loading under {NEXT_BACKEND} failed:\n{proc.stderr[-3000:]}"
    for name, model in models.items():
        want = run(model, x)
        assert np.abs(want).max() > 0.1
        np.testing.assert_allclose(np.load(tmp_path / f"{name}-loaded.npy"), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=f"{name}: {BACKEND} -> {NEXT_BACKEND}")


def test_a_dense_model_trains():
    vit = backbone(patch_size=8, depth=2)
    model = keras_vit.DenseModel(vit, "dpt", "semantic", num_classes=3, layers=[0, 0, 1, 1], **NECK)
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255),
                  metrics=[keras.metrics.MeanIoU(num_classes=3, ignore_class=255, sparse_y_pred=False)])
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32"), rng.integers(0, 3, (4, 16, 16))
    y[:, :, :3] = 255
    history = model.fit(x, y, epochs=4, batch_size=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0] and 0 < history["mean_io_u"][-1] <= 1


@pytest.mark.parametrize("args, message", [
    (dict(head="unet"), "Unknown head 'unet'; expected one of"),
    (dict(task="panoptic"), "Unknown task 'panoptic'; expected one of"),
    (dict(task="semantic"), "needs num_classes="),
    (dict(task="depth", num_classes=3), "predicts one value per pixel"),
    (dict(head="linear", num_classes=3, readout="add"), r"Unknown option\(s\) \['readout'\]"),
    (dict(head="dpt", task="depth", readout="mean"), "Unknown readout 'mean'"),
    (dict(head="dpt", task="depth", reassemble_factors=(4, 2, 1)), "one factor per neck size"),
    (dict(head="dpt", task="depth", reassemble_factors=(3, 2, 1, 0.4)), "1/n"),
    (dict(head="linear", num_classes=0), "num_classes=0"),
    (dict(head="linear", num_classes=2, layers=[7]), "not one of the model's 4 encoder blocks"),
])
def test_bad_arguments_are_refused_in_one_line(backbones, args, message):
    args = {"head": "linear", "task": "semantic", **args}
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.DenseModel(backbones["DINOv2S14"], **args)
    assert "\n" not in str(error.value)


def test_backbones_without_what_a_head_reads_are_refused(backbones):
    with pytest.raises(ValueError, match="reads the class token"):
        keras_vit.DenseModel(backbones["SigLIPB16"], "dpt", "depth", readout="project", **NECK)
    with pytest.raises(ValueError, match="no class token"):
        keras_vit.DenseModel(backbones["SigLIPB16"], "linear", num_classes=2, class_token=True)
    naflex = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, naflex=True,
                                         class_token=False, include_top=False, pooling=None)
    with pytest.raises(ValueError, match="NaFlex backbone") as error:
        keras_vit.DenseModel(naflex, "linear", num_classes=2)
    assert "\n" not in str(error.value)
