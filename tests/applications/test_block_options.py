"""The block options of issue 31 (qk_norm, norm="rmsnorm", qkv_bias / proj_bias / mlp_bias,
patch_drop_rate): timm-layout files with them, written here, load through `from_checkpoint`
and give the logits of a plain-torch forward of the same state dict; the exporter writes them back."""

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import keras_vit
from keras_vit.layers import PatchDropout
from keras_vit.weights.export import export
from keras_vit.weights.containers import write_safetensors
from tests.support.checkpoints import timm_reference_logits

torch = pytest.importorskip("torch")

WIDTH, HEADS, MLP, DEPTH, PATCH, SIZE, CLASSES = 16, 2, 32, 2, 4, 8, 5
OPTIONS = {
    "qk_norm": dict(qk_norm=True),
    "rmsnorm": dict(norm="rmsnorm"),
    "rmsnorm_qk_norm": dict(norm="rmsnorm", qk_norm=True),
    "no_biases": dict(qkv_bias=False, proj_bias=False, mlp_bias=False),
    "all": dict(norm="rmsnorm", qk_norm=True, qkv_bias=False, proj_bias=False, mlp_bias=False),
}


def timm_state_dict(rng, qk_norm=False, norm="layernorm", qkv_bias=True, proj_bias=True, mlp_bias=True):
    """Random weights under timm's `VisionTransformer` names (`Attention(qk_norm=...)`, `RmsNorm`: a
    `weight` only, `qkv_bias=False`, `proj_bias=False`, `Mlp(bias=False)`: no `bias` key)."""
    head_dim = WIDTH // HEADS

    def r(*shape):
        return rng.normal(0, 0.3, shape).astype(np.float32)

    def norm_of(p, dim=WIDTH):
        return {p + "weight": 1 + r(dim), **({p + "bias": r(dim)} if norm == "layernorm" else {})}

    sd = {"patch_embed.proj.weight": r(WIDTH, 3, PATCH, PATCH), "patch_embed.proj.bias": r(WIDTH),
          "cls_token": r(1, 1, WIDTH), "pos_embed": r(1, 1 + (SIZE // PATCH) ** 2, WIDTH),
          **norm_of("norm."), "head.weight": r(CLASSES, WIDTH), "head.bias": r(CLASSES)}
    for i in range(DEPTH):
        p = f"blocks.{i}."
        sd.update({**norm_of(p + "norm1."), **norm_of(p + "norm2."), p + "attn.qkv.weight": r(3 * WIDTH, WIDTH),
                   p + "attn.proj.weight": r(WIDTH, WIDTH), p + "mlp.fc1.weight": r(MLP, WIDTH),
                   p + "mlp.fc2.weight": r(WIDTH, MLP)})
        if qkv_bias:
            sd[p + "attn.qkv.bias"] = r(3 * WIDTH)
        if proj_bias:
            sd[p + "attn.proj.bias"] = r(WIDTH)
        if mlp_bias:
            sd.update({p + "mlp.fc1.bias": r(MLP), p + "mlp.fc2.bias": r(WIDTH)})
        if qk_norm:
            sd.update({**norm_of(p + "attn.q_norm.", head_dim), **norm_of(p + "attn.k_norm.", head_dim)})
    return sd


def logits(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))


@pytest.mark.parametrize("name", OPTIONS)
def test_timm_file_with_the_options_loads_runs_and_exports(name, tmp_path):
    rng = np.random.default_rng(0)
    options = OPTIONS[name]
    sd = timm_state_dict(rng, **options)
    path = tmp_path / "timm.safetensors"
    write_safetensors(str(path), sd, {"format": "pt"})
    model = keras_vit.from_checkpoint(str(path), num_heads=HEADS, classifier_activation=None)
    encoder = model.get_layer("encoder")
    for key, value in options.items():
        assert getattr(encoder, key) == value, key
    x = rng.uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
    np.testing.assert_allclose(logits(model, x), timm_reference_logits(sd, x, HEADS), atol=1e-5, rtol=1e-5)

    out = tmp_path / "exported.safetensors"
    export(model, str(out), format="timm")
    written = load_file(str(out))
    assert written.keys() == sd.keys()
    for key in sd:
        np.testing.assert_allclose(written[key], sd[key], atol=1e-6, err_msg=key)


@pytest.mark.parametrize("name", ["all", "qk_norm"])
def test_keras_file_with_the_options_reloads(name, tmp_path):
    model = keras_vit.VisionTransformer(PATCH, WIDTH, DEPTH, HEADS, MLP, input_shape=(SIZE, SIZE, 3), classes=CLASSES,
                                       patch_drop_rate=0.5, **OPTIONS[name])
    for variable in model.weights:
        variable.assign(np.random.default_rng(1).normal(0, 0.3, variable.shape).astype(np.float32))
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(2).uniform(-1, 1, (2, SIZE, SIZE, 3)).astype(np.float32)
    np.testing.assert_allclose(logits(again, x), logits(model, x), atol=1e-6)
    assert again.get_layer("patch_dropout").rate == 0.5


def test_bias_free_and_rmsnorm_models_have_no_such_variables():
    model = keras_vit.VisionTransformer(PATCH, WIDTH, 1, HEADS, MLP, input_shape=(SIZE, SIZE, 3), **OPTIONS["all"])
    paths = [v.path for v in model.weights]
    assert not [p for p in paths if p.startswith("encoder/") and p.endswith(("/bias", "/beta"))]
    assert "encoder/encoderblock_0/attention/q_norm/gamma" in paths


def test_patch_dropout_keeps_the_prefix_and_a_random_subset_of_patches():
    prefix, patches, rate = 2, 10, 0.5
    tokens = np.random.default_rng(3).normal(size=(4, prefix + patches, 8)).astype(np.float32)
    layer = PatchDropout(rate, num_prefix_tokens=prefix, seed=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(tokens)), tokens)  # inference: identity
    kept = keras.ops.convert_to_numpy(layer(tokens, training=True))
    assert kept.shape == (4, prefix + max(1, int(patches * (1 - rate))), 8)  # timm's num_keep
    np.testing.assert_array_equal(kept[:, :prefix], tokens[:, :prefix])
    chosen = []
    for image in range(4):
        rows = [int(np.flatnonzero((tokens[image, prefix:] == row).all(-1))[0]) for row in kept[image, prefix:]]
        assert len(set(rows)) == len(rows)  # distinct patches of this image
        chosen.append(tuple(sorted(rows)))
    assert len(set(chosen)) > 1  # drawn per image
    assert PatchDropout(0.9, 1)(tokens, training=True).shape[1] == 1 + 1  # at least one patch


def test_patch_dropout_trains_a_model():
    model = keras_vit.VisionTransformer(PATCH, WIDTH, 1, HEADS, MLP, input_shape=(SIZE, SIZE, 3), classes=CLASSES,
                                       patch_drop_rate=0.5, seed=0)
    x = np.random.default_rng(4).uniform(-1, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
    assert keras.ops.convert_to_numpy(model(x, training=True)).shape == (4, CLASSES)
    np.testing.assert_array_equal(logits(model, x), logits(model, x))  # no dropping at inference


@pytest.mark.parametrize("args, message", [
    (dict(norm="batchnorm"), "Unknown norm='batchnorm'; expected one of layernorm, rmsnorm."),
    (dict(qk_norm="yes"), "qk_norm='yes' must be true/false."),
    (dict(patch_drop_rate=1.0), "patch_drop_rate=1.0 must be in [0, 1)."),
    (dict(patch_drop_rate=0.5, position_embedding="rope"), "patch_drop_rate with position_embedding='rope'"),
])
def test_bad_options_are_refused_in_one_line(args, message):
    with pytest.raises(ValueError) as error:
        keras_vit.VisionTransformer(PATCH, WIDTH, 1, HEADS, MLP, input_shape=(SIZE, SIZE, 3), **args)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("format", ["npz", "hf", "kerashub"])
def test_formats_without_the_options_refuse_them_in_one_line(format, tmp_path):
    """transformers' ViT would fill a missing norm bias with zeros: an RMSNorm model read back as a LayerNorm one."""
    model = keras_vit.VisionTransformer(PATCH, WIDTH, 1, HEADS, MLP, input_shape=(SIZE, SIZE, 3), classes=CLASSES,
                                       norm="rmsnorm", qk_norm=True)
    with pytest.raises(ValueError, match=r"^[^\n]*qk_norm=True, norm='rmsnorm' cannot be written as [^\n]*timm"):
        export(model, str(tmp_path / f"out_{format}"), format=format)
    assert not list(tmp_path.iterdir())
