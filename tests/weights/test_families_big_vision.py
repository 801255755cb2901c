"""big_vision's class-token-free checkpoints (plain ViT with `gap` pooling and fixed sincos2d
position embeddings, the `img/` tower of a SigLIP file with its MAP head) written from their
key lists, against an independent NumPy forward pass; and the options round-tripping through
keras_vit's own files."""

import keras
import numpy as np
import pytest

import keras_vit
from benchmarks.numpy_vit import block, gelu, layer_norm, patchify, softmax
from tests.support.checkpoints import original_npz_params

PATCH, WIDTH, HEADS, GRID = 8, 32, 4, (4, 4)
LINEN = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
         "MlpBlock_3": "MlpBlock_0"}


def sincos2d(h, w, dim, temperature=10_000.0):
    """SPEC section 7: `[sin(x w), cos(x w), sin(y w), cos(y w)]`, `w = 1 / T ** (arange(D/4) / (D/4 - 1))`."""
    omega = 1.0 / temperature ** (np.arange(dim // 4) / (dim // 4 - 1))
    y, x = np.mgrid[:h, :w]
    x, y = np.outer(x.ravel(), omega), np.outer(y.ravel(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


def map_params(rng, d=WIDTH, m=64):
    def normal(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    a = "MAPHead_0/MultiHeadDotProductAttention_0/"
    params = {"MAPHead_0/probe": normal(1, 1, d)}
    for n in ("query", "key", "value"):
        params[a + n + "/kernel"], params[a + n + "/bias"] = normal(d, HEADS, d // HEADS, std=d**-0.5), normal(HEADS, d // HEADS, std=0.1)
    params[a + "out/kernel"], params[a + "out/bias"] = normal(HEADS, d // HEADS, d, std=d**-0.5), normal(d, std=0.1)
    params["MAPHead_0/LayerNorm_0/scale"], params["MAPHead_0/LayerNorm_0/bias"] = 1 + normal(d, std=0.2), normal(d, std=0.1)
    params["MAPHead_0/MlpBlock_0/Dense_0/kernel"], params["MAPHead_0/MlpBlock_0/Dense_0/bias"] = normal(d, m, std=d**-0.5), normal(m, std=0.1)
    params["MAPHead_0/MlpBlock_0/Dense_1/kernel"], params["MAPHead_0/MlpBlock_0/Dense_1/bias"] = normal(m, d, std=m**-0.5), normal(d, std=0.1)
    return params


def big_vision_file(path, params, prefix="params/"):
    """`params` (canonical names) under big_vision's: linen module names, the prefix."""
    renamed = {prefix + "/".join(LINEN.get(p, p) for p in k.split("/")): v for k, v in params.items()}
    np.savez(path, **renamed)
    return str(path)


def reference(images, params, pooling):
    """The class-token-free ViT in NumPy: sincos2d (without a `pos_embedding`), then `pooling`."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    d = WIDTH
    x = patchify(images.astype(np.float64), PATCH) @ p["embedding/kernel"].reshape(-1, d) + p["embedding/bias"]
    x = x + (p["pos_embedding"][0] if "pos_embedding" in p else sincos2d(images.shape[1] // PATCH, images.shape[2] // PATCH, d))
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in p:
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        bp = {"ln1_s": p[b + "LayerNorm_0/scale"], "ln1_b": p[b + "LayerNorm_0/bias"],
              "ln2_s": p[b + "LayerNorm_2/scale"], "ln2_b": p[b + "LayerNorm_2/bias"],
              "o_w": p[a + "out/kernel"].reshape(d, d), "o_b": p[a + "out/bias"],
              **{f"fc{j + 1}_{t}": p[b + f"MlpBlock_3/Dense_{j}/" + n] for j in (0, 1) for t, n in (("w", "kernel"), ("b", "bias"))}}
        for n in ("query", "key", "value"):
            bp[n[0] + "_w"], bp[n[0] + "_b"] = p[a + n + "/kernel"].reshape(d, d), p[a + n + "/bias"].reshape(d)
        x, _ = block(x, bp, HEADS, approximate_gelu=True)
        i += 1
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])
    if pooling == "avg":
        return x.mean(1) @ p["head/kernel"] + p["head/bias"]
    a = "MAPHead_0/MultiHeadDotProductAttention_0/"
    heads = lambda t, n: (t @ p[a + n + "/kernel"].reshape(d, d) + p[a + n + "/bias"].reshape(d)).reshape(t.shape[0], -1, HEADS, d // HEADS)
    q, k, v = heads(p["MAPHead_0/probe"], "query"), heads(x, "key"), heads(x, "value")
    w = softmax(np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // HEADS))
    y = np.einsum("bhqk,bkhd->bqhd", w, v).reshape(x.shape[0], d) @ p[a + "out/kernel"].reshape(d, d) + p[a + "out/bias"]
    h = layer_norm(y, p["MAPHead_0/LayerNorm_0/scale"], p["MAPHead_0/LayerNorm_0/bias"])
    mlp = "MAPHead_0/MlpBlock_0/"
    return y + gelu(h @ p[mlp + "Dense_0/kernel"] + p[mlp + "Dense_0/bias"], True) @ p[mlp + "Dense_1/kernel"] + p[mlp + "Dense_1/bias"]


def _close(actual, expected):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(actual), expected, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def plain_gap(tmp_path_factory):
    params = original_npz_params(np.random.default_rng(1), classes=5)
    del params["cls"], params["Transformer/posembed_input/pos_embedding"]
    return big_vision_file(tmp_path_factory.mktemp("bv") / "vit_s16_gap.npz", params), params


def test_plain_vit_gap_sincos2d(plain_gap, rng):
    path, params = plain_gap
    model = keras_vit.from_checkpoint(path, classifier_activation=None, input_shape=(32, 32, 3))
    assert "class_token" not in [layer.name for layer in model.layers]
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    _close(model(x), reference(x, params, "avg"))
    wide = keras_vit.from_checkpoint(path, classifier_activation=None, input_shape=(32, 48, 3))  # no table to resize
    x = rng.uniform(-1, 1, (1, 32, 48, 3)).astype(np.float32)
    _close(wide(x), reference(x, params, "avg"))


def test_siglip_img_tower_with_map_head(tmp_path, rng):
    params = original_npz_params(np.random.default_rng(2), classes=None)
    del params["cls"]
    params["pos_embedding"] = params.pop("Transformer/posembed_input/pos_embedding")[:, 1:]
    params.update(map_params(np.random.default_rng(3)))
    path = big_vision_file(tmp_path / "siglip.npz", params, prefix="params/img/")
    model = keras_vit.from_checkpoint(path)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    _close(model(x), reference(x, params, "map"))


def test_class_token_free_models_export_back_to_big_vision(plain_gap, tmp_path, rng):
    path, _ = plain_gap
    model = keras_vit.from_checkpoint(path, classifier_activation=None, input_shape=(32, 32, 3))
    keras_vit.weights.export(model, tmp_path / "again.npz")
    again = keras_vit.from_checkpoint(str(tmp_path / "again.npz"), classifier_activation=None, input_shape=(32, 32, 3))
    x = rng.uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    _close(again(x), keras.ops.convert_to_numpy(model(x)))
