"""DINOv2's linear segmentation head files (mmseg `BNHead` checkpoints, written here with random
weights in their layout) read onto a tiny DINOv2 backbone by `keras_vit.from_checkpoint(path,
backbone=)`: logits against NumPy (the backbone's normed block tokens, BatchNorm with the running
statistics, a 1x1 convolution; torch's own bilinear up-sampling with `align_corners=False`), and the
files that do not fit refused in one line."""

import numpy as np
import pytest

import keras_vit
from tests.support.dense import head_state, write_head

torch = pytest.importorskip("torch")

WIDTH, DEPTH, PATCH, EPS = 16, 4, 14, 1e-5  # EPS: SyncBatchNorm's default, DINOv2's configs set no other
TINY = dict(hidden_dim=WIDTH, depth=DEPTH, num_heads=2, mlp_dim=32, input_shape=(None, None, 3), include_top=False,
            pooling=None, weights=None)


def bilinear(x, size):
    """torch's `interpolate(mode="bilinear", align_corners=False)` (mmseg's `resize`) of `(batch, h, w, c)`."""
    nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    resized = torch.nn.functional.interpolate(nchw, size=tuple(size), mode="bilinear", align_corners=False)
    return resized.numpy().transpose(0, 2, 3, 1)


def reference(vit, state, images, layers, class_token=False):
    """The head's logits from the backbone's normed tokens of `layers`, in NumPy (float64)."""
    h, w = images.shape[1] // PATCH, images.shape[2] // PATCH
    maps = []
    for tokens in keras_vit.features(vit, images, layers, norm=True):
        grid = tokens[:, 1:].reshape(len(images), h, w, WIDTH)
        maps += [grid, np.broadcast_to(tokens[:, :1, None], grid.shape)] if class_token else [grid]
    x = np.concatenate(maps, -1).astype("float64")
    s = {k[len("decode_head."):]: v.numpy().astype("float64") for k, v in state.items()}
    x = (x - s["bn.running_mean"]) / np.sqrt(s["bn.running_var"] + EPS) * s["bn.weight"] + s["bn.bias"]
    x = x @ s["conv_seg.weight"][:, :, 0, 0].T + s["conv_seg.bias"]
    return bilinear(x, images.shape[1:3])


@pytest.fixture(scope="module")
def vit():
    from tests.support.models import randomize

    return randomize(keras_vit.DINOv2S14(**TINY), seed=3)


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(1).uniform(-1, 1, (2, 2 * PATCH, 3 * PATCH, 3)).astype("float32")


@pytest.mark.parametrize("kind, blocks", [("linear", 1), ("ms", 4)])
def test_head_files_give_dinov2s_logits(vit, images, tmp_path, kind, blocks):
    state = head_state(blocks * WIDTH, 5, seed=blocks)
    model = keras_vit.from_checkpoint(write_head(tmp_path / f"{kind}_head.pth", state), backbone=vit)
    assert model.get_layer("linear_head").class_token is False
    for x in (images, images[:1, :, : 2 * PATCH]):  # two sizes: any multiple of the patch
        got = model.predict(x, verbose=0)
        want = reference(vit, state, x, list(range(-blocks, 0)))
        assert got.shape == (len(x), *x.shape[1:3], 5)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_class_token_beside_the_patches_and_chosen_blocks(vit, images, tmp_path):
    state = head_state(2 * 2 * WIDTH, 3)  # the depth heads' layout: two blocks, each with its class token
    path = write_head(tmp_path / "head.pth", state)
    model = keras_vit.from_checkpoint(path, backbone=vit, layers=[1, 3], class_token=True)
    want = reference(vit, state, images, [1, 3], class_token=True)
    np.testing.assert_allclose(model.predict(images, verbose=0), want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


def _drop(state, key):
    return {k: v for k, v in state.items() if k != key}


@pytest.mark.backend_independent  # refused before any weight is read
@pytest.mark.parametrize("state, args, message", [
    (head_state(24, 3), {}, "in_channels 24 is not a whole number"),
    (head_state(5 * WIDTH, 3), {}, r"in_channels 80 is not a whole number \(1..4\) of blocks"),
    (head_state(WIDTH, 3), {"layers": [-2, -1]}, "in_channels 16 is not 2 blocks"),
    (head_state(WIDTH, 3), {"num_classes": 150}, "predicts 3 classes, not num_classes=150"),
    (_drop(head_state(WIDTH, 3), "decode_head.bn.running_var"), {}, "running_var"),
    ({**head_state(WIDTH, 3), "backbone.cls_token": torch.zeros(1, 1, WIDTH)}, {}, "keys outside the decode head"),
    (head_state(WIDTH, 3), {"backbone": None}, "give the backbone it was trained on"),
])
def test_files_that_do_not_fit_are_refused_in_one_line(vit, tmp_path, state, args, message):
    path = write_head(tmp_path / "head.pth", state)
    with pytest.raises(ValueError, match=message) as error:
        keras_vit.from_checkpoint(path, **{"backbone": vit, **args})
    assert "\n" not in str(error.value)


@pytest.mark.backend_independent  # the table
def test_named_head_files_with_their_backbones_and_licence():
    from keras_vit.weights import registry

    heads = {e.name: e for e in registry.DENSE if e.name in registry.DENSE_BACKBONES}
    assert len(heads) == 16  # S, B, L, g x ADE20K, VOC 2012 x linear, ms
    entry = heads["dinov2_vitg14_voc2012_ms_head"]
    assert entry.url == "https://dl.fbaipublicfiles.com/dinov2/dinov2_vitg14/dinov2_vitg14_voc2012_ms_head.pth"
    assert (entry.variant, entry.license, entry.container) == ("DINOv2G14", "apache-2.0", "torch")
    assert registry.DENSE_BACKBONES["dinov2_vits14_ade20k_linear_head"] == "DINOv2S14/vit_small_patch14_dinov2.lvd142m"
    for name, e in heads.items():
        backbone = registry.find(registry.DENSE_BACKBONES[name])
        assert backbone.variant == e.variant and backbone.url.startswith("https://huggingface.co/timm/")


def test_named_head_file_read_from_the_cache_and_its_backbone_offline_one_line(vit, images, tmp_path, monkeypatch):
    from keras_vit.weights import registry

    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("KERAS_VIT_HOME", str(tmp_path))

    def offline(**kwargs):
        raise OSError("We have no connection (offline)")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    entry = registry.find("dinov2_vits14_voc2012_linear_head")
    target = registry.cache_path(entry)
    (tmp_path / entry.variant / entry.name).mkdir(parents=True)
    state = head_state(WIDTH, 21)
    write_head(target, state)
    model = keras_vit.from_checkpoint(entry.name, backbone=vit)
    want = reference(vit, state, images, [-1])
    np.testing.assert_allclose(model.predict(images, verbose=0), want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))
    with pytest.raises(OSError) as error:  # its own backbone, DINOv2-S's published weights, not in the cache
        keras_vit.from_checkpoint(entry.name)
    assert "\n" not in str(error.value) and "vit_small_patch14_dinov2.lvd142m" in str(error.value)
