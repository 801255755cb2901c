"""The named builders default to their published ImageNet-1k classifier, as `keras.applications`
(`weights="imagenet"`): the entry the registry names, fetched without a `weights=` argument; the
models without one default to None; offline, a one-line error names the cache path and
`weights=None`."""

import inspect

import pytest

import keras_vit
from keras_vit.weights import DownloadError, registry

pytestmark = pytest.mark.backend_independent  # the entry chosen and the download error: no tensor is computed


class Chosen(Exception):
    """Raised by the stand-in download with the entry asked for."""


@pytest.fixture
def chosen(monkeypatch):
    def fetch(entry, force=False):
        raise Chosen(entry)

    monkeypatch.setattr("keras_vit.weights.download.fetch", fetch)


@pytest.mark.parametrize("name, variant, entry", [
    ("ViTB16", "ViTB16", "augreg_in21k_ft_in1k_224"),
    ("ViTL32", "ViTL32", "orig_in21k_ft_in1k_384"),
    ("DeiTS16", "DeiTS16", "deit_small_distilled_patch16_224.fb_in1k"),
    ("RoPEViTS16", "RoPEViTS16", "vit_small_patch16_rope_224.naver_in1k"),
])
def test_a_builder_without_weights_fetches_its_imagenet_classifier(chosen, name, variant, entry):
    with pytest.raises(Chosen) as caught:
        getattr(keras_vit, name)()  # the default weights
    assert (caught.value.args[0].variant, caught.value.args[0].name) == (variant, entry)
    assert caught.value.args[0].classes == 1000


def test_every_default_is_an_imagenet_classifier_or_none():
    defaults = {name: inspect.signature(getattr(keras_vit, name)).parameters["weights"].default
                for name in keras_vit.list_models()}
    for name, weights in defaults.items():
        if weights is not None:
            assert registry.find(weights, name).classes == 1000, name
        else:
            assert not any(e.classes == 1000 for e in registry.entries(name)), name
    assert {name for name, weights in defaults.items() if weights is None} >= {
        "ViTH14", "DINOv2S14", "DINOv3B16", "SigLIPB16", "AIMv2L14", "CLIPB16"}
    assert inspect.signature(keras_vit.VisionTransformer).parameters["weights"].default is None
    assert "weights=None builds it with random weights" in keras_vit.ViTB16.__doc__
    assert "has no ImageNet-1k classifier" in keras_vit.DINOv2S14.__doc__


def test_offline_a_builder_says_where_to_put_the_file_and_weights_none():
    """No network in the tests: the real download fails, in one line."""
    entry = registry.find("imagenet", "ViTTi16")
    with pytest.raises(DownloadError) as caught:
        keras_vit.ViTTi16()  # the default weights, offline
    message = str(caught.value)
    assert "\n" not in message and registry.cache_path(entry) in message and "weights=None" in message
