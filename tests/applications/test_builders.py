"""The builders: parameter counts, outputs, heads, pooling, argument errors, ImageNet helpers."""

import keras
import numpy as np
import pytest

import keras_vit
from tests.support.models import shapes_only

# Paper Table 1 / SPEC.md: timm's counts for the same structure, 224 px, 1000 classes.
PARAMS = {
    "ViTTi16": 5_717_416,
    "ViTS16": 22_050_664,
    "ViTS32": 22_878_952,
    "ViTB16": 86_567_656,
    "ViTB32": 88_224_232,
    "ViTL16": 304_326_632,
    "ViTL32": 306_535_400,
    "ViTH14": 632_045_800,
}


@pytest.mark.parametrize("name", PARAMS)
def test_parameter_count(name):
    with shapes_only():
        model = getattr(keras_vit, name)(weights=None)
        assert model.count_params() == PARAMS[name]
        assert model.output_shape == (None, 1000)


def test_b16_predicts_probabilities(rng):
    model = keras_vit.ViTB16(weights=None)
    images = keras_vit.preprocess_input(rng.integers(0, 256, (2, 224, 224, 3)))
    probs = model.predict(images, verbose=0)
    assert probs.shape == (2, 1000)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert np.all(probs >= 0)


def test_exported_at_top_level_and_in_applications():
    for name in PARAMS:
        assert getattr(keras_vit, name) is getattr(keras_vit.applications, name)


SMALL = dict(patch_size=8, hidden_dim=32, depth=1, num_heads=2, mlp_dim=32, input_shape=(32, 32, 3))


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(include_top=False), (None, 17, 32)),
        (dict(include_top=False, pooling="token"), (None, 32)),
        (dict(include_top=False, pooling="avg"), (None, 32)),
        (dict(classes=10), (None, 10)),
        (dict(classes=10, pooling="avg", representation_size=16), (None, 10)),
        (dict(input_shape=(None, None, 3), include_top=False, pooling="avg"), (None, 32)),
        (dict(input_shape=(32, 64, 1), classes=2), (None, 2)),
    ],
)
def test_output_shapes(kwargs, shape):
    assert keras_vit.VisionTransformer(**{**SMALL, **kwargs}).output_shape == shape


def test_representation_size_adds_tanh_pre_logits():
    model = keras_vit.VisionTransformer(**SMALL, representation_size=24, classes=3)
    layer = model.get_layer("pre_logits")
    assert layer.units == 24 and layer.activation is keras.activations.tanh
    plain = keras_vit.VisionTransformer(**SMALL, classes=3)
    assert "pre_logits" not in [layer.name for layer in plain.layers]


def test_classifier_activation_none_gives_logits(rng):
    logits_model = keras_vit.VisionTransformer(**SMALL, classes=4, classifier_activation=None)
    head = logits_model.get_layer("head")
    head.set_weights([w + rng.standard_normal(w.shape).astype("float32") for w in head.get_weights()])
    probs_model = keras_vit.VisionTransformer(**SMALL, classes=4)
    probs_model.set_weights(logits_model.get_weights())
    images = rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    logits = logits_model.predict(images, verbose=0)
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(probs_model.predict(images, verbose=0), expected, atol=1e-6)
    assert np.abs(logits.sum(1) - 1).max() > 1e-3


def test_head_is_zero_initialised():
    model = keras_vit.VisionTransformer(**SMALL, classes=5)
    for weight in model.get_layer("head").get_weights():
        assert not np.any(weight)


def test_input_tensor_is_used():
    images = keras.Input((32, 32, 3), name="my_images")
    model = keras_vit.VisionTransformer(**SMALL, input_tensor=images, classes=3)
    assert model.inputs[0] is images


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(input_shape=(30, 32, 3)), ["input_shape", "30", "multiples of the patch size 8"]),
        (dict(input_shape=(32, 32)), ["input_shape", "(height, width, channels)"]),
        (dict(pooling="max"), ["pooling", "'max'", "token", "avg"]),
        (dict(classifier_activation="softmaxx"), ["classifier_activation", "softmaxx", "softmax"]),
        (dict(classes=0), ["classes", "[1, 262144]"]),
        # sizes that would exhaust memory (keras_vit.utils.limits), refused before anything is built
        (dict(mlp_dim=10**9), ["mlp_dim=1000000000", "[1, 262144]"]),
        (dict(depth=10**5), ["depth=100000", "[1, 1024]"]),
        (dict(input_shape=(400000, 400000, 3)), ["160000000000 pixels", "16384 x 16384"]),
        (dict(hidden_dim=2**16, num_heads=2**10, mlp_dim=2**18, depth=2**10), ["weights (accepted: up to 34359738368)"]),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, words):
    with pytest.raises(ValueError) as error:
        keras_vit.VisionTransformer(**{**SMALL, **kwargs})
    for word in words:
        assert word in str(error.value)


def test_wrong_image_size_for_a_builder_names_the_patch_size():
    with pytest.raises(ValueError, match=r"input_shape=\(225, 225, 3\).*multiples of the patch size 16"):
        keras_vit.ViTB16(weights=None, input_shape=(225, 225, 3))


def test_rgb_required_for_pretrained_weights():
    with pytest.raises(ValueError, match="3 \\(RGB\\)"):
        keras_vit.ViTTi16(input_shape=(224, 224, 1), weights="imagenet")


def test_preprocess_input_scales_to_minus_one_one():
    x = np.array([[0.0, 127.5, 255.0]])
    np.testing.assert_allclose(keras_vit.preprocess_input(x), [[-1.0, 0.0, 1.0]])
    tensor = keras.ops.convert_to_tensor(x, "float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(keras_vit.preprocess_input(tensor)), [[-1, 0, 1]])


def test_decode_predictions_uses_shipped_imagenet_labels():
    preds = np.zeros((2, 1000), "float32")
    preds[0, [1, 207, 999]] = [0.5, 0.3, 0.2]
    preds[1, 954] = 1.0
    decoded = keras_vit.decode_predictions(preds, top=3)
    assert [name for _, name, _ in decoded[0]] == ["goldfish", "golden_retriever", "toilet_tissue"]
    assert decoded[0][0] == ("n01443537", "goldfish", 0.5)
    assert decoded[1][0][:2] == ("n07753592", "banana")
    with pytest.raises(ValueError, match="\\(samples, 1000\\)"):
        keras_vit.decode_predictions(np.zeros((2, 10)))


def test_builder_arguments_are_declared_once():
    """The signature, the docstring, the config and the relay into the layers all come from the
    declarations of `keras_vit.config.vit_config`."""
    import dataclasses
    import inspect

    from keras_vit.config import vit_config
    from keras_vit.layers.encoder import BLOCK_OPTIONS, Encoder

    declared = [field.name for field in dataclasses.fields(vit_config.ViTConfig)]
    inputs = [name for name, _ in vit_config.INPUTS]
    signature = inspect.signature(keras_vit.VisionTransformer).parameters
    assert sorted(signature) == sorted(declared + inputs)
    assert all(f"    {name}: " in keras_vit.VisionTransformer.__doc__ for name in signature)
    relayed = vit_config.ViTConfig().relayed(vit_config.ENCODER)
    encoder_args = set(inspect.signature(Encoder).parameters) | set(BLOCK_OPTIONS)
    assert relayed and set(relayed) <= encoder_args


def test_named_builders_are_exported_and_documented():
    import inspect

    import keras_vit.applications as applications

    for name in keras_vit.list_models():
        builder = getattr(applications, name)
        assert builder is getattr(keras_vit, name) and builder.__name__ == name and builder.__doc__
        parameters = list(inspect.signature(builder).parameters)
        assert parameters[:7] == ["include_top", "weights", "input_tensor", "input_shape", "pooling", "classes",
                                  "classifier_activation"]
    assert inspect.signature(applications.SigLIPB16).parameters["pooling"].default == "map"


def test_decode_predictions_of_the_imagenet21k_heads():
    """21,843 classes in sorted WordNet-id order (the in21k heads'); the 1000 ImageNet-2012
    classes among them (all but the teddy bear, n04399382, absent from the fall-2011 release)
    carry the names of the 1000-class list."""
    from keras_vit.data.imagenet import imagenet21k_classes, imagenet_classes

    classes = imagenet21k_classes()
    ids = [wnid for wnid, _ in classes]
    assert len(classes) == 21843 and ids == sorted(set(ids))
    names = dict(classes)
    shared = [(wnid, name) for wnid, name in imagenet_classes() if wnid in names]
    assert len(shared) == 999 and all(names[wnid] == name for wnid, name in shared)
    preds = np.zeros((1, 21843), "float32")
    preds[0, ids.index("n02099601")] = 0.5
    assert keras_vit.decode_predictions(preds, top=1) == [[("n02099601", "golden_retriever", 0.5)]]
    with pytest.raises(ValueError, match=r"\(samples, 1000\) or, ImageNet-21k, \(samples, 21843\)"):
        keras_vit.decode_predictions(np.zeros((1, 21842)))
