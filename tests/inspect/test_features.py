"""keras_vit.features / feature_extractor: the tokens after chosen encoder blocks."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import ResNetV2Stem
from tests.support.models import randomize
from tests.support.checkpoints import TINY, TINY_IMAGE, images, randomize_hf_model

DIM, DEPTH, HEADS, MLP = 32, 2, 2, 64


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def tiny_vit(input_shape=(16, 16, 3), **kwargs):
    return randomize(keras_vit.VisionTransformer(4, DIM, DEPTH, HEADS, MLP, input_shape=input_shape, **kwargs))


def tiny_hybrid(depth=DEPTH):
    return keras_vit.VisionTransformer(
        1, DIM, depth, HEADS, MLP, input_shape=(32, 32, 3), include_top=False,
        stem=ResNetV2Stem((1, 2), width=32),
    )


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=TINY["hidden_dim"], num_hidden_layers=TINY["depth"], num_attention_heads=TINY["num_heads"],
        intermediate_size=TINY["mlp_dim"], image_size=TINY_IMAGE, patch_size=TINY["patch_size"],
        layer_norm_eps=1e-6, hidden_act="gelu", num_labels=5,
    )
    folder = tmp_path_factory.mktemp("hf_features")
    randomize_hf_model(transformers.ViTForImageClassification(config).eval(), seed=3).save_pretrained(folder)
    return folder


def test_matches_transformers_hidden_states(hf_folder, rng):
    torch = pytest.importorskip("torch")
    import transformers

    x = images(rng)
    hf = transformers.ViTForImageClassification.from_pretrained(hf_folder).eval()
    with torch.no_grad():
        out = hf.vit(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), output_hidden_states=True)
    hidden = [h.numpy() for h in out.hidden_states]  # [embeddings, after block 0, after block 1]
    model = keras_vit.VisionTransformer(**TINY, classes=5, weights=str(hf_folder))

    last, first = keras_vit.features(model, x, layers=[-1, 0])  # negative indices, the order asked
    assert np.abs(hidden[1]).max() > 0.5  # not a comparison of near-zero numbers
    np.testing.assert_allclose(first, hidden[1], atol=1e-5, rtol=0)
    np.testing.assert_allclose(last, hidden[2], atol=1e-5, rtol=0)
    normed = keras_vit.features(model, x, layers=1, norm=True)
    np.testing.assert_allclose(normed, out.last_hidden_state.numpy(), atol=1e-5, rtol=0)
    grids = keras_vit.features(model, x, grid=True)  # None: every block
    side = TINY_IMAGE // TINY["patch_size"]
    for grid, reference in zip(grids, hidden[1:]):
        assert grid.shape == (2, side, side, TINY["hidden_dim"])
        np.testing.assert_allclose(grid, reference[:, 1:].reshape(grid.shape), atol=1e-5, rtol=0)


def test_hybrid_blocks_match_shallower_hybrid(rng):
    """Block 0 (normalised) of a 2-block hybrid is the output of a 1-block hybrid with its weights."""
    keras.utils.set_random_seed(1)
    deep, shallow = randomize(tiny_hybrid()), tiny_hybrid(depth=1)
    for layer in shallow.layers:
        if layer.name != "encoder":
            layer.set_weights(deep.get_layer(layer.name).get_weights())
    deep_encoder, shallow_encoder = deep.get_layer("encoder"), shallow.get_layer("encoder")
    shallow_encoder.blocks[0].set_weights(deep_encoder.blocks[0].get_weights())
    shallow_encoder.encoder_norm.set_weights(deep_encoder.encoder_norm.get_weights())
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")

    first, last = keras_vit.features(deep, x, layers=[0, 1], norm=True)
    np.testing.assert_allclose(first, numpy(shallow(x)), atol=1e-5, rtol=0)
    np.testing.assert_allclose(last, numpy(deep(x)), atol=1e-5, rtol=0)
    grid = keras_vit.features(deep, x, layers=0, norm=True, grid=True)
    assert grid.shape == (2, 4, 4, DIM)  # 32 px, stem stride 8
    np.testing.assert_allclose(grid, first[:, 1:].reshape(2, 4, 4, DIM), atol=0, rtol=0)


def test_any_image_size_model(rng):
    model = tiny_vit(input_shape=(None, None, 3), include_top=False)
    x = rng.uniform(-1, 1, (2, 24, 20, 3)).astype("float32")
    tokens = keras_vit.features(model, x, layers=-1, norm=True)
    np.testing.assert_allclose(tokens, numpy(model(x)), atol=1e-5, rtol=0)
    assert tokens.shape == (2, 1 + 6 * 5, DIM)
    grid = keras_vit.features(model, x, layers=-1, norm=True, grid=True, batch_size=1)
    np.testing.assert_allclose(grid, tokens[:, 1:].reshape(2, 6, 5, DIM), atol=1e-5, rtol=0)  # other batch size


def test_extractor_saves_and_trains_the_model_weights(rng, tmp_path):
    model = tiny_vit(input_shape=(None, None, 3))
    extractor = keras_vit.feature_extractor(model, [0, -1], grid=True)
    x = rng.uniform(-1, 1, (4, 16, 12, 3)).astype("float32")
    path = str(tmp_path / "features.keras")
    extractor.save(path)
    loaded = keras.saving.load_model(path)
    for a, b in zip(extractor(x), loaded(x)):
        assert a.shape == (4, 4, 3, DIM)
        np.testing.assert_allclose(numpy(a), numpy(b), atol=1e-6, rtol=0)

    single = keras_vit.feature_extractor(model, 0, grid=True)  # trains the model's own variables
    before = numpy(model.get_layer("embedding").kernel)
    single.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    single.fit(x, np.zeros((4, 4, 3, DIM), "float32"), epochs=1, batch_size=4, verbose=0)
    assert np.abs(numpy(model.get_layer("embedding").kernel) - before).max() > 0


@pytest.fixture(scope="module")
def vit():
    return tiny_vit()


@pytest.mark.parametrize("layers", [[2], [-3], 5, [], [0, "1"], [1.0], True, "all"])
def test_bad_layer_indices(layers, vit):
    with pytest.raises(ValueError, match=r"^layers=.*(encoder blocks|expected)") as info:
        keras_vit.feature_extractor(vit, layers)
    assert "\n" not in str(info.value)


def test_not_a_vit_or_not_a_batch(vit):
    other = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten()])
    with pytest.raises(ValueError, match="has no layer 'encoder'; this needs a keras_vit Vision Transformer"):
        keras_vit.features(other, np.zeros((1, 16, 16, 3)))
    with pytest.raises(ValueError, match="must be a batch"):
        keras_vit.features(vit, np.zeros((16, 16, 3)))
