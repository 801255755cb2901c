"""`export(format="hf")` of the families beyond the paper: keras_vit models with random weights
written as DeiT / DINOv2 (with registers, SwiGLU) / SigLIP folders, loaded by transformers as
the architecture the folder names, with the same outputs within 1e-5; and what those models
cannot hold refused in one line."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import export
from tests.support.models import randomize

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(32, 32, 3), weights=None)
X = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)


def _exported(model, tmp_path):
    """The transformers model of the folder `model` is exported to, as its config names it."""
    folder = str(tmp_path / "hf")
    export(model, folder, format="hf")
    architecture = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
    return architecture, getattr(transformers, architecture).from_pretrained(folder).eval(), folder


def _outputs(reference, name):
    with torch.no_grad():
        return getattr(reference(pixel_values=torch.from_numpy(X.transpose(0, 3, 1, 2))), name).numpy()


def _check(model, tmp_path, architecture, output):
    found, reference, folder = _exported(model, tmp_path)
    assert found == architecture
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(X)), _outputs(reference, output), atol=1e-5, rtol=0)
    return folder


def test_deit_distilled_with_both_heads(tmp_path):
    model = randomize(keras_vit.DeiTTi16(**SMALL, classes=3, classifier_activation=None), seed=1)
    folder = _check(model, tmp_path, "DeiTForImageClassificationWithTeacher", "logits")
    assert json.load(open(os.path.join(folder, "preprocessor_config.json")))["image_mean"] == [0.485, 0.456, 0.406]
    back = keras_vit.from_checkpoint(folder, classifier_activation=None)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(back(X)), keras.ops.convert_to_numpy(model(X)), atol=1e-5)


def test_deit_with_the_class_token_head_only(tmp_path):
    model = keras_vit.DeiTTi16(**SMALL, classes=3, classifier_activation=None, distillation_head=False)
    _check(randomize(model, seed=2), tmp_path, "DeiTForImageClassification", "logits")


def test_dinov2_with_registers(tmp_path):
    model = randomize(keras_vit.DINOv2S14(**SMALL, num_registers=3), seed=3)
    _check(model, tmp_path, "Dinov2WithRegistersModel", "last_hidden_state")


def test_dinov2_swiglu(tmp_path):
    model = randomize(keras_vit.DINOv2S14(**SMALL, mlp="swiglu"), seed=4)
    _check(model, tmp_path, "Dinov2Model", "last_hidden_state")


def test_siglip_map_head(tmp_path):
    model = randomize(keras_vit.SigLIPB16(**SMALL), seed=5)
    folder = _check(model, tmp_path, "SiglipVisionModel", "pooler_output")
    assert json.load(open(os.path.join(folder, "preprocessor_config.json")))["image_processor_type"] == "SiglipImageProcessor"


@pytest.mark.parametrize("builder, args, message", [
    ("DINOv2S14", dict(include_top=True, classes=3), "DINOv2 needs None \\(export it with include_top=False\\)"),
    ("SigLIPB16", dict(position_embedding="sincos2d"), "it has position_embedding='sincos2d', SigLIP needs 'learned'"),
    ("DINOv2S14", dict(mlp="swiglu", mlp_dim=60), "its SwiGLU width 60 is not a multiple of 8"),
])
def test_what_the_family_cannot_hold_is_refused(tmp_path, builder, args, message):
    model = getattr(keras_vit, builder)(**{**SMALL, **args})
    with pytest.raises(ValueError, match=f"Cannot export .* as a Hugging Face .*{message}"):
        export(model, str(tmp_path / "hf"), format="hf")
    assert not os.path.exists(tmp_path / "hf")
