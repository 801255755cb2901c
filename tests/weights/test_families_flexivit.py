"""FlexiViT's patch-size change: the resized patch embedding gives, for a patch resized to the
new size, the token the old patch gave; a checkpoint loads at another patch size."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights.patch_resize import resize_patch_kernel
from tests.support.checkpoints import original_npz_params


def _resize(patches, size):
    """Bilinear resize (half-pixel, no antialiasing) by Keras, independent of keras_vit's matrix."""
    return keras.ops.convert_to_numpy(
        keras.ops.image.resize(patches, (size, size), interpolation="bilinear", antialias=False)
    ).astype(np.float64)


def _per_patch_upsampled(images, patch, size):
    """Each `patch` x `patch` tile of `images` resized to `size` x `size`, tiled again."""
    b, h, w, c = images.shape
    tiles = images.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    tiles = _resize(tiles.reshape(-1, patch, patch, c).astype(np.float32), size)
    tiles = tiles.reshape(b, h // patch, w // patch, size, size, c).transpose(0, 1, 3, 2, 4, 5)
    return tiles.reshape(b, h // patch * size, w // patch * size, c).astype(np.float32)


def test_resized_kernel_keeps_every_patch_token(rng):
    kernel = rng.standard_normal((8, 8, 3, 5))
    patches = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
    for size in (12, 16):
        new = resize_patch_kernel(kernel, size)
        expected = np.einsum("bhwc,hwcd->bd", patches.astype(np.float64), kernel)
        np.testing.assert_allclose(np.einsum("bhwc,hwcd->bd", _resize(patches, size), new), expected, atol=1e-5)


def test_checkpoint_loads_at_another_patch_size(tmp_path, rng):
    params = original_npz_params(np.random.default_rng(4), classes=5)
    np.savez(tmp_path / "vit.npz", **params)
    model = keras_vit.from_checkpoint(str(tmp_path / "vit.npz"), classifier_activation=None)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)
    flexi = keras_vit.from_checkpoint(str(tmp_path / "vit.npz"), patch_size=16, classifier_activation=None,
                                      input_shape=(64, 64, 3))
    assert flexi.get_layer("embedding").kernel.shape == (16, 16, 3, 32)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(flexi(_per_patch_upsampled(x, 8, 16))), keras.ops.convert_to_numpy(model(x)),
        atol=1e-5,
    )
    same_resolution = keras_vit.from_checkpoint(str(tmp_path / "vit.npz"), patch_size=16)
    assert same_resolution.input_shape[1:3] == (32, 32)  # the checkpoint's resolution, a 2 x 2 grid


def _timm_resample_patch_embed(kernel, new_size):
    """timm's `resample_patch_embed` as it reads (on an HWIO kernel): the resize matrix of
    bicubic antialiased `F.interpolate` on each basis patch, its pseudo-inverse applied."""
    torch = pytest.importorskip("torch")
    old = kernel.shape[:2]
    columns = []
    for i in range(old[0] * old[1]):
        basis = np.zeros(old)
        basis[np.unravel_index(i, old)] = 1.0
        up = torch.nn.functional.interpolate(torch.Tensor(basis)[None, None], size=(new_size, new_size),
                                             mode="bicubic", antialias=True)
        columns.append(up[0, 0].numpy().reshape(-1))
    pinv = np.linalg.pinv(np.stack(columns))  # timm: pinv(resize_mat.T), resize_mat = stack(columns).T
    flat = kernel.reshape(old[0] * old[1], -1)
    return (pinv @ flat).reshape(new_size, new_size, *kernel.shape[2:])


def test_timm_files_resize_the_patch_embedding_as_timm(tmp_path):
    """A timm file at another patch size: timm's operator (antialiased bicubic), not big_vision's."""
    params = original_npz_params(np.random.default_rng(5), classes=5)
    model = keras_vit.from_checkpoint(_save(tmp_path, params), approximate_gelu=False)
    keras_vit.weights.export(model, str(tmp_path / "timm.safetensors"), format="timm")
    kernel = params["embedding/kernel"]
    for size in (16, 4):
        expected = _timm_resample_patch_embed(kernel, size)
        np.testing.assert_allclose(resize_patch_kernel(kernel, size, "bicubic_antialias"), expected, atol=1e-5)
        flexi = keras_vit.from_checkpoint(str(tmp_path / "timm.safetensors"), num_heads=4, patch_size=size)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(flexi.get_layer("embedding").kernel), expected,
                                   atol=1e-5)
        assert np.abs(resize_patch_kernel(kernel, size) - expected).max() > 1e-3  # big_vision's differs


def _save(tmp_path, params):
    np.savez(tmp_path / "vit.npz", **params)
    return str(tmp_path / "vit.npz")
