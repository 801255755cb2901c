"""A Hugging Face export runs as is in `transformers.pipeline("image-classification")`."""

import json

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import export
from tests.support.models import randomize

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
Image = pytest.importorskip("PIL.Image")

TINY = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64)


def picture(size, seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def run_pipeline(folder, image, top):
    classify = transformers.pipeline("image-classification", model=str(folder), device="cpu")
    return classify(image, top_k=top)


def test_imagenet_head_same_top_classes_and_scores(tmp_path):
    """ImageNet names as labels; tanh GELU ("gelu_pytorch_tanh") and the epsilon carried over."""
    model = keras_vit.VisionTransformer(**TINY, input_shape=(32, 32, 3), approximate_gelu=True, layer_norm_epsilon=1e-5)
    randomize(model, seed=1, scale=0.5)
    image = picture(32)
    ours = keras_vit.decode_predictions(model.predict(keras_vit.preprocess_input(np.asarray(image)[None]), verbose=0))[0]
    export(model, tmp_path / "hf", format="hf")
    theirs = run_pipeline(tmp_path / "hf", image, top=5)
    assert [r["label"] for r in theirs] == [name for _, name, _ in ours]
    np.testing.assert_allclose([r["score"] for r in theirs], [s for _, _, s in ours], atol=1e-5, rtol=1e-4)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["layer_norm_eps"] == 1e-5 and config["image_size"] == 32
    assert config["id2label"]["0"] == "tench" and config["label2id"]["tench"] == 0


def test_preprocessor_resizes_to_the_model_size(tmp_path):
    """Another image size is resized by the processor to the exported resolution
    (non-square grid included); mean/std 0.5 are the project's [-1, 1] scaling."""
    model = keras_vit.VisionTransformer(**TINY, input_shape=(24, 40, 3), classes=3, classifier_activation=None)
    randomize(model, seed=2)
    export(model, tmp_path / "hf", format="hf")
    processor = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert processor["size"] == {"height": 24, "width": 40}
    assert processor["image_mean"] == processor["image_std"] == [0.5, 0.5, 0.5]
    image = picture(64, seed=3)
    resized = np.asarray(image.resize((40, 24), Image.Resampling(processor["resample"])), np.float32)
    logits = model.predict(keras_vit.preprocess_input(resized[None]), verbose=0)[0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    theirs = run_pipeline(tmp_path / "hf", image, top=3)
    assert [r["label"] for r in theirs] == [f"LABEL_{i}" for i in np.argsort(-probs)]
    np.testing.assert_allclose([r["score"] for r in theirs], np.sort(probs)[::-1], atol=1e-5, rtol=1e-4)
