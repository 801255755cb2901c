"""DINOv3's 2-D rotary position embeddings against transformers' `DINOv3ViTRopePositionEmbedding`
and `apply_rotary_pos_emb`, and the attention that applies them."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.rope import RopePositionEmbedding, rotate, rotation

torch = pytest.importorskip("torch")
dinov3 = pytest.importorskip("transformers.models.dinov3_vit.modeling_dinov3_vit")
from transformers import DINOv3ViTConfig  # noqa: E402

PREFIX = 5  # class + 4 registers


def reference_rope(grid, head_dim, heads, theta=100.0):
    """transformers' `(cos, sin)` for an image of `grid` patches of 4 pixels."""
    config = DINOv3ViTConfig(hidden_size=head_dim * heads, num_attention_heads=heads, patch_size=4,
                             rope_theta=theta)
    layer = dinov3.DINOv3ViTRopePositionEmbedding(config).eval()
    return layer(torch.zeros(1, 3, 4 * grid[0], 4 * grid[1]))


def coordinates(grid):
    layer = RopePositionEmbedding(grid, PREFIX)
    return layer(keras.ops.zeros((1, PREFIX + grid[0] * grid[1], 8)), keras.ops.zeros((1, *grid, 8)))


@pytest.mark.parametrize("grid", [(4, 4), (3, 5), (6, 2)])
def test_rotation_matches_transformers(rng, grid):
    heads, head_dim = 2, 16
    cos, sin = rotation(coordinates(grid)[0], head_dim)
    ref_cos, ref_sin = reference_rope(grid, head_dim, heads)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cos), ref_cos.numpy(), atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(sin), ref_sin.numpy(), atol=1e-6)
    q, k = (rng.normal(size=(2, PREFIX + grid[0] * grid[1], heads, head_dim)).astype("float32") for _ in range(2))
    ref_q, ref_k = dinov3.apply_rotary_pos_emb(*(torch.from_numpy(t).transpose(1, 2) for t in (q, k)),
                                               ref_cos, ref_sin)
    for ours, ref in ((rotate(q, cos, sin), ref_q), (rotate(k, cos, sin), ref_k)):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), ref.transpose(1, 2).numpy(), atol=1e-5)


def test_rotation_stays_float32_for_bfloat16_queries(rng):
    """The angles and the rotation are float32 whatever the compute dtype: a bfloat16 query comes
    back as transformers' float32 rotation of it, rounded once to bfloat16."""
    grid, head_dim = (8, 8), 64
    q = keras.ops.cast(rng.normal(size=(1, 1 + 64, 1, head_dim)).astype("float32"), "bfloat16")
    cos, sin = rotation(coordinates(grid)[0], head_dim)
    ours = rotate(q, cos, sin)
    assert keras.backend.standardize_dtype(ours.dtype) == "bfloat16"
    exact = torch.from_numpy(keras.ops.convert_to_numpy(keras.ops.cast(q, "float32"))).transpose(1, 2)
    exact = dinov3.apply_rotary_pos_emb(exact, exact, *reference_rope(grid, head_dim, 1))[0]
    exact = exact.transpose(1, 2).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.cast(ours, "float32")), exact)


def test_attention_rotates_patch_queries_and_keys_and_drops_the_key_bias(rng):
    """Our attention with rope and key_bias=False equals transformers' `DINOv3ViTAttention`
    (no key bias) given the same projections, a non-zero key bias in our `qkv` included."""
    heads, dim, grid = 2, 32, (3, 4)
    tokens = PREFIX + grid[0] * grid[1]
    config = DINOv3ViTConfig(hidden_size=dim, num_attention_heads=heads, patch_size=4)
    ref = dinov3.DINOv3ViTAttention(config).eval()
    config._attn_implementation = "eager"
    layer = MultiHeadSelfAttention(heads, key_bias=False)
    layer.build((1, tokens, dim))
    weights = {n: rng.normal(size=(dim, dim)).astype("float32") * 0.3 for n in "qkvo"}
    biases = {n: rng.normal(size=(dim,)).astype("float32") for n in "qkvo"}
    layer.qkv.kernel.assign(np.concatenate([weights[n] for n in "qkv"], axis=1))
    layer.qkv.bias.assign(np.concatenate([biases[n] for n in "qkv"]))
    layer.out.kernel.assign(weights["o"])
    layer.out.bias.assign(biases["o"])
    with torch.no_grad():
        for n, proj in (("q", ref.q_proj), ("k", ref.k_proj), ("v", ref.v_proj), ("o", ref.o_proj)):
            proj.weight.copy_(torch.from_numpy(weights[n].T))
            if proj.bias is not None:
                proj.bias.copy_(torch.from_numpy(biases[n]))
        x = rng.normal(size=(2, tokens, dim)).astype("float32")
        expected = ref(torch.from_numpy(x), position_embeddings=reference_rope(grid, dim // heads, heads))[0]
    ours = layer(x, rope=coordinates(grid))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), expected.numpy(), atol=1e-5)


def test_rope_model_takes_any_grid_and_leaves_no_position_table(rng):
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64, include_top=False, num_registers=2,
        position_embedding="rope", input_shape=(None, None, 3))
    assert not [w for w in model.weights if "posembed" in w.path]
    for size in ((16, 16), (12, 20)):
        out = model(rng.uniform(-1, 1, (1, *size, 3)).astype("float32"))
        assert tuple(out.shape) == (1, 3 + size[0] * size[1] // 16, 32)


def test_training_augmentation_moves_the_coordinates_only_while_training():
    layer = RopePositionEmbedding((3, 3), shift=0.5, jitter=2.0, rescale=2.0, seed=1)
    grid = keras.ops.zeros((1, 3, 3, 4))
    plain = keras.ops.convert_to_numpy(layer(keras.ops.zeros((1, 9, 4)), grid))
    moved = keras.ops.convert_to_numpy(layer(keras.ops.zeros((1, 9, 4)), grid, training=True))
    np.testing.assert_allclose(plain, keras.ops.convert_to_numpy(coordinates((3, 3))))
    assert not np.allclose(plain, moved)
    # one affine map per axis: x - x0 scales by one factor for every patch
    x, x0 = plain[0, :, 1], plain[0, 0, 1]
    ratio = (moved[0, x != x0, 1] - moved[0, 0, 1]) / (x[x != x0] - x0)
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)


def test_a_training_step_leaves_the_dropped_key_bias_and_moves_the_rest(rng):
    """One SGD step of a DINOv3-style model (rope with its training augmentation, no key bias):
    the key part of the `qkv` bias gets no gradient, the query and value parts do."""
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, include_top=False, pooling="token",
        num_registers=2, position_embedding="rope", key_bias=False, rope_rescale=2.0, rope_jitter=1.5,
        rope_shift=0.1, layer_scale_init=1.0, seed=0, input_shape=(12, 16, 3))
    bias = model.get_layer("encoder").blocks[0].attention.qkv.bias
    bias.assign(rng.normal(size=bias.shape).astype("float32"))
    before = keras.ops.convert_to_numpy(bias).reshape(3, 16)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    model.fit(rng.uniform(-1, 1, (4, 12, 16, 3)).astype("float32"), rng.normal(size=(4, 16)).astype("float32"),
              epochs=1, batch_size=4, verbose=0)
    after = keras.ops.convert_to_numpy(bias).reshape(3, 16)
    np.testing.assert_array_equal(after[1], before[1])
    assert not np.allclose(after[0], before[0]) and not np.allclose(after[2], before[2])
