"""The paper's class-token-free model (App. D.3) from the training configuration:
`class_token=false` (a `--set` / recipe field) builds it, pooled by the mean; the class-token
pooling is refused for it in one line."""

import pytest

from keras_vit.training.recipes import recipe
from keras_vit.training.trainer import build_model

TINY = dict(hidden_dim=16, depth=1, num_heads=2, mlp_dim=32)


def test_class_token_false_builds_the_gap_model():
    config = recipe("digits", **TINY).override(["class_token=false"])
    model = build_model(config, num_classes=10)
    names = [layer.name for layer in model.layers]
    assert "class_token" not in names and model.get_layer("pooling").mode == "avg"
    assert model.get_layer("posembed_input").num_prefix_tokens == 0
    assert "class_token" in [layer.name for layer in build_model(recipe("digits", **TINY), num_classes=10).layers]


def test_class_token_pooling_needs_the_class_token():
    config = recipe("digits", **TINY).override(["class_token=false", "pooling=token"])
    with pytest.raises(ValueError, match="pooling='token' reads the class token; with class_token=False use 'avg'"):
        build_model(config, num_classes=10)
