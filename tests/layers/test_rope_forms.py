"""The axial and mixed rotary forms (`rope_form`) against a torch reference of timm's
`build_rotary_pos_embed` / `get_mixed_freqs` / `apply_rot_embed_cat` (`tests/support/timm_rope_vit.py`):
the reference grid's scaling, the float32 rotation of bfloat16 queries, the unrotated prefix,
timm's initial mixed frequencies, and the option checks."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.layers.rope import RopePositionEmbedding, axial_rotation, mixed_frequencies, mixed_rotation, rotate

torch = pytest.importorskip("torch")
from tests.support import timm_rope_vit as reference  # noqa: E402

PREFIX = 1


def indices(grid, reference_grid=None, form="axial"):
    layer = RopePositionEmbedding(grid, PREFIX, form=form, reference_grid=reference_grid)
    return layer(keras.ops.zeros((1, PREFIX + grid[0] * grid[1], 8)), keras.ops.zeros((1, *grid, 8)))[0]


def timm_rotated(x, sin, cos):
    """`x` `(batch, tokens, heads, head_dim)` rotated as timm's `AttentionRope` (prefix left)."""
    t = torch.from_numpy(x).transpose(1, 2)
    t = torch.cat([t[:, :, :PREFIX], reference.apply(t[:, :, PREFIX:], sin, cos)], dim=2)
    return t.transpose(1, 2).numpy()


@pytest.mark.parametrize("grid, reference_grid", [((3, 5), None), ((6, 4), (3, 2)), ((4, 4), (14, 14))])
def test_axial_rotation_matches_timm(rng, grid, reference_grid):
    head_dim = 16
    cos, sin = axial_rotation(indices(grid, reference_grid), head_dim, 100.0)
    ref_sin, ref_cos = reference.axial_embed(*grid, head_dim, 100.0, reference=reference_grid)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cos), ref_cos.numpy(), atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(sin), ref_sin.numpy(), atol=1e-6)
    q = rng.normal(size=(2, PREFIX + grid[0] * grid[1], 2, head_dim)).astype("float32")
    ours = keras.ops.convert_to_numpy(rotate(q, cos, sin, interleaved=True))
    np.testing.assert_allclose(ours, timm_rotated(q, ref_sin, ref_cos), atol=1e-5)
    np.testing.assert_array_equal(ours[:, :PREFIX], q[:, :PREFIX])


@pytest.mark.parametrize("grid", [(3, 5), (4, 4)])
def test_mixed_rotation_matches_timm(rng, grid):
    heads, head_dim = 3, 8
    freqs = rng.normal(size=(2, heads, head_dim // 2)).astype("float32")
    cos, sin = mixed_rotation(indices(grid, form="mixed"), freqs)
    ref_sin, ref_cos = reference.mixed_embed(torch.from_numpy(freqs), *grid)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cos), ref_cos.transpose(0, 1).numpy(), atol=1e-5)
    q = rng.normal(size=(2, PREFIX + grid[0] * grid[1], heads, head_dim)).astype("float32")
    ours = keras.ops.convert_to_numpy(rotate(q, cos, sin, interleaved=True))
    np.testing.assert_allclose(ours, timm_rotated(q, ref_sin, ref_cos), atol=1e-5)


@pytest.mark.parametrize("form", ["axial", "mixed"])
def test_rotation_stays_float32_for_bfloat16_queries(rng, form):
    """A bfloat16 query comes back as the float32 rotation of it, rounded once to bfloat16."""
    grid, heads, head_dim = (8, 8), 2, 64
    q = keras.ops.cast(rng.normal(size=(1, PREFIX + 64, heads, head_dim)).astype("float32"), "bfloat16")
    if form == "axial":
        cos, sin = axial_rotation(indices(grid), head_dim, 100.0)
        ref_sin, ref_cos = reference.axial_embed(*grid, head_dim, 100.0)
    else:
        freqs = rng.normal(size=(2, heads, head_dim // 2)).astype("float32")
        cos, sin = mixed_rotation(indices(grid, form="mixed"), freqs)
        ref_sin, ref_cos = reference.mixed_embed(torch.from_numpy(freqs), *grid)
    ours = rotate(q, cos, sin, interleaved=True)
    assert keras.backend.standardize_dtype(ours.dtype) == "bfloat16"
    exact = timm_rotated(keras.ops.convert_to_numpy(keras.ops.cast(q, "float32")), ref_sin, ref_cos)
    exact = torch.from_numpy(exact).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras.ops.cast(ours, "float32")), exact)


def test_initial_mixed_frequencies_are_timms(rng):
    """timm's `init_random_2d_freqs`: pair j (< head_dim / 4) has magnitude theta^(-4j / head_dim)
    at a random angle per head, pair j + head_dim / 4 the same magnitude a quarter turn further."""
    heads, head_dim, theta = 4, 16, 10.0
    fx, fy = keras.ops.convert_to_numpy(mixed_frequencies(heads, head_dim, theta, seed=3))
    quarter = head_dim // 4
    magnitude = theta ** -(np.arange(0, head_dim, 4) / head_dim)
    np.testing.assert_allclose(np.hypot(fx, fy), np.tile(magnitude, (heads, 2)), rtol=1e-5)
    angle = np.arctan2(fy, fx)
    turn = np.angle(np.exp(1j * (angle[:, quarter:] - angle[:, :quarter])))
    np.testing.assert_allclose(turn, np.pi / 2, atol=1e-5)
    np.testing.assert_allclose(np.angle(np.exp(1j * (angle[:, :quarter] - angle[:, :1]))), 0, atol=1e-5)
    assert np.ptp(angle[:, 0]) > 0.1  # a random angle per head


def test_mixed_attention_saves_and_restores_its_form():
    layer = MultiHeadSelfAttention(2, rope_form="mixed", rope_theta=10.0)
    layer.build((1, 5, 16))
    again = MultiHeadSelfAttention.from_config(layer.get_config())
    again.build((1, 5, 16))
    assert again.rope_form == "mixed" and tuple(again.rope_frequencies.shape) == (2, 2, 4)
    embedding = RopePositionEmbedding((2, 2), form="axial", reference_grid=(4, 4))
    assert RopePositionEmbedding.from_config(embedding.get_config()).reference_grid == (4, 4)


@pytest.mark.parametrize("options, message", [
    (dict(rope_form="axial"), "need position_embedding='rope'"),
    (dict(position_embedding="rope", rope_form="mixed", rope_reference_grid=(14, 14)), "use rope_form='axial'"),
    (dict(position_embedding="rope", rope_form="spiral"), "Unknown rope_form='spiral'"),
    (dict(position_embedding="rope", rope_form="axial", rope_reference_grid=(14,)), "rope_reference_grid=.*2 finite"),
])
def test_bad_rope_options_are_refused_in_one_line(options, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.VisionTransformer(4, 16, 1, 2, 32, input_shape=(8, 8, 3), **options)


def test_a_training_step_moves_the_mixed_frequencies(rng):
    """The learned frequencies get gradients (one SGD step moves every block's)."""
    model = keras_vit.VisionTransformer(4, 16, 2, 2, 32, include_top=False, pooling="token", position_embedding="rope",
                                        rope_form="mixed", seed=0, input_shape=(8, 12, 3))
    blocks = model.get_layer("encoder").blocks
    before = [keras.ops.convert_to_numpy(b.attention.rope_frequencies) for b in blocks]
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    model.fit(rng.uniform(-1, 1, (4, 8, 12, 3)).astype("float32"), rng.normal(size=(4, 16)).astype("float32"),
              epochs=1, batch_size=4, verbose=0)
    for block, old in zip(blocks, before):
        assert not np.allclose(keras.ops.convert_to_numpy(block.attention.rope_frequencies), old)
