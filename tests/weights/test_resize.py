"""Loading a checkpoint at another resolution: position embeddings resized in 2-D."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.config.interpolation import INTERPOLATIONS
from keras_vit.layers.position_embedding import PositionEmbedding, resize_position_embedding
from keras_vit.weights import PretrainedWeights
from tests.support.checkpoints import original_npz_params

POSEMB = "Transformer/posembed_input/pos_embedding"
ARCH = dict(patch_size=16, hidden_dim=32, depth=1, num_heads=2, mlp_dim=64)


@pytest.mark.parametrize("old, new", [((14, 14), (24, 24)), ((7, 5), (9, 11))])
def test_bilinear_matches_scipy_zoom(rng, old, new):
    ndimage = pytest.importorskip("scipy.ndimage")
    posemb = rng.standard_normal((1, 1 + old[0] * old[1], 8)).astype(np.float32)
    out = resize_position_embedding(posemb, new, old_grid=old, method="bilinear")
    grid = posemb[0, 1:].reshape(*old, 8)
    zoom = ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    np.testing.assert_allclose(out[0, 1:].reshape(*new, 8), zoom, atol=1e-5)
    np.testing.assert_array_equal(out[:, :1], posemb[:, :1])


def _library_resize(name, grid, new):
    """`grid` `(h, w, d)` resized to `new` by the library each convention follows."""
    torch = pytest.importorskip("torch")
    if name == "bilinear":
        ndimage = pytest.importorskip("scipy.ndimage")
        return ndimage.zoom(grid, (new[0] / grid.shape[0], new[1] / grid.shape[1], 1), order=1)
    if name == "bilinear_antialias":
        jax = pytest.importorskip("jax")
        return np.asarray(jax.image.resize(grid, (*new, grid.shape[-1]), "linear"))
    nchw = torch.from_numpy(grid).permute(2, 0, 1)[None]
    out = torch.nn.functional.interpolate(nchw, size=new, mode="bicubic", align_corners=False,
                                          antialias=name == "bicubic_antialias")
    return out[0].permute(1, 2, 0).numpy()


@pytest.mark.parametrize("name", sorted(INTERPOLATIONS))
@pytest.mark.parametrize("old, new", [((6, 6), (10, 10)), ((9, 9), (4, 4)), ((6, 6), (3, 8)), ((5, 7), (7, 3))])
def test_each_convention_is_its_library_resize(rng, name, old, new):
    """Larger, smaller, non-square: the patch rows as the library resizes them, the two
    prefix rows (class, distillation) kept as they are, at load time and at run time."""
    posemb = rng.standard_normal((1, 2 + old[0] * old[1], 8)).astype(np.float32)
    expected = _library_resize(name, posemb[0, 2:].reshape(*old, 8), new)
    out = resize_position_embedding(posemb, new, num_prefix_tokens=2, old_grid=old, method=name)
    layer = PositionEmbedding(old, num_prefix_tokens=2, interpolation=name)
    layer.build((1, posemb.shape[1], 8))
    layer.embeddings.assign(posemb)
    run_time = np.concatenate([keras.ops.convert_to_numpy(t) for t in layer._patch_table(*new, "float32")], axis=1)
    for got in (out, run_time):
        np.testing.assert_array_equal(got[:, :2], posemb[:, :2])
        np.testing.assert_allclose(got[0, 2:].reshape(*new, 8), expected, atol=1e-5, rtol=0)


def test_the_convention_is_a_builder_argument_kept_in_the_config(tmp_path):
    default = keras_vit.VisionTransformer(**ARCH, classes=3, input_shape=(None, None, 3))
    assert default.get_layer("posembed_input").interpolation == "bilinear"  # the paper's, as before
    model = keras_vit.VisionTransformer(**ARCH, classes=3, input_shape=(None, None, 3), interpolation="bicubic")
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").get_layer("posembed_input").interpolation == "bicubic"
    with pytest.raises(ValueError, match="Unknown interpolation 'area'; expected one of"):
        keras_vit.VisionTransformer(**ARCH, interpolation="area")


def test_bicubic_matches_torch_interpolate(rng):
    torch = pytest.importorskip("torch")
    posemb = rng.standard_normal((1, 1 + 14 * 14, 8)).astype(np.float32)
    out = resize_position_embedding(posemb, (24, 24), method="bicubic")
    grid = torch.from_numpy(posemb[0, 1:].reshape(1, 14, 14, 8)).permute(0, 3, 1, 2)
    reference = torch.nn.functional.interpolate(grid, size=(24, 24), mode="bicubic", align_corners=False)
    np.testing.assert_allclose(out[0, 1:].reshape(24, 24, 8), reference[0].permute(1, 2, 0).numpy(), atol=1e-5)


@pytest.fixture
def ckpt_224(rng, tmp_path):
    params = original_npz_params(rng, **ARCH, grid=(14, 14), classes=3)
    np.savez(tmp_path / "res224.npz", **params)
    return tmp_path / "res224.npz", params


def _table(model):
    return keras.ops.convert_to_numpy(model.get_layer("posembed_input").embeddings)


def test_224_to_384(ckpt_224, rng):
    ndimage = pytest.importorskip("scipy.ndimage")
    path, params = ckpt_224
    model = keras_vit.VisionTransformer(**ARCH, classes=3, input_shape=(384, 384, 3), weights=str(path))
    table, old = _table(model), params[POSEMB]
    assert table.shape == (1, 1 + 24 * 24, 32)
    np.testing.assert_array_equal(table[:, 0], old[:, 0])  # the class-token row is kept as is
    expected = ndimage.zoom(old[0, 1:].reshape(14, 14, 32), (24 / 14, 24 / 14, 1), order=1)
    np.testing.assert_allclose(table[0, 1:].reshape(24, 24, 32), expected, atol=1e-5)
    probs = keras.ops.convert_to_numpy(model(rng.uniform(-1, 1, (1, 384, 384, 3)).astype(np.float32)))
    assert probs.shape == (1, 3) and np.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-5)


def test_bicubic_on_request(ckpt_224):
    torch = pytest.importorskip("torch")
    path, params = ckpt_224
    weights = PretrainedWeights(str(path), interpolation="bicubic")
    model = keras_vit.VisionTransformer(**ARCH, classes=3, input_shape=(384, 384, 3), weights=weights)
    grid = torch.from_numpy(params[POSEMB][0, 1:].reshape(1, 14, 14, 32)).permute(0, 3, 1, 2)
    expected = torch.nn.functional.interpolate(grid, size=(24, 24), mode="bicubic", align_corners=False)
    np.testing.assert_allclose(
        _table(model)[0, 1:].reshape(24, 24, 32), expected[0].permute(1, 2, 0).numpy(), atol=1e-5
    )
    with pytest.raises(ValueError, match="Unknown interpolation 'nearest'"):
        PretrainedWeights(str(path), interpolation="nearest")


def test_default_input_size_follows_checkpoint(rng, tmp_path):
    np.savez(tmp_path / "res384.npz", **original_npz_params(rng, **ARCH, grid=(24, 24), classes=3))
    model = keras_vit.VisionTransformer(**ARCH, classes=3, weights=str(tmp_path / "res384.npz"))
    assert tuple(model.input_shape) == (None, 384, 384, 3)
    flexible = keras_vit.VisionTransformer(
        **ARCH, classes=3, input_shape=(None, None, 3), weights=str(tmp_path / "res384.npz")
    )
    assert flexible.get_layer("posembed_input").grid_size == (24, 24)  # no needless resize


def test_unmappable_grid_is_a_clear_error(rng, tmp_path):
    params = original_npz_params(rng, **ARCH, grid=(14, 14), classes=3)
    params[POSEMB] = params[POSEMB][:, :-1]  # 1 + 195 rows: no 2-D grid
    np.savez(tmp_path / "odd.npz", **params)
    with pytest.raises(ValueError, match=r"pos_embedding.*\(1, 196, 32\).*195.*not a square"):
        keras_vit.VisionTransformer(**ARCH, classes=3, input_shape=(384, 384, 3), weights=str(tmp_path / "odd.npz"))
