"""keras_vit.inspect: attention rollout, mean attention distance, embedding pictures, PNGs."""

import itertools
import math

import keras
import numpy as np
import pytest
from PIL import Image

from keras_vit import VisionTransformer, inspect
from keras_vit.cli import main
from keras_vit.layers import ResNetV2Stem

DIM, DEPTH, HEADS, MLP, SIZE, GRID = 32, 2, 2, 64, 32, 4  # patch 8 (ViT) / stride 8 (hybrid)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_vit():
    return VisionTransformer(8, DIM, DEPTH, HEADS, MLP, input_shape=(SIZE, SIZE, 3), classes=5)


def tiny_hybrid():
    return VisionTransformer(
        1, DIM, DEPTH, HEADS, MLP, input_shape=(SIZE, SIZE, 3), classes=5,
        stem=ResNetV2Stem((1, 2), width=32),
    )


@pytest.fixture(scope="module")
def models():
    keras.utils.set_random_seed(3)
    return {"vit": tiny_vit(), "hybrid": tiny_hybrid()}


@pytest.fixture
def images(rng):
    return rng.uniform(-1, 1, size=(2, SIZE, SIZE, 3)).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def grid_mean_distance(rows, cols, pixels):
    """Mean distance between all ordered pairs of cells' centres, by brute force."""
    cells = list(itertools.product(range(rows), range(cols)))
    total = sum(math.dist((a[0] * pixels, a[1] * pixels), (b[0] * pixels, b[1] * pixels)) for a in cells for b in cells)
    return total / len(cells) ** 2


def uniform_attention(model):
    """Zero q/k projections: every attention row becomes exactly uniform."""
    for block in model.get_layer("encoder").blocks:
        qkv = block.attention.qkv
        qkv.kernel.assign(np.zeros(qkv.kernel.shape, np.float32))
        qkv.bias.assign(np.zeros(qkv.bias.shape, np.float32))


# ----------------------------------------------------------------------- rollout


def test_rollout_rows_are_distributions(rng):
    weights = [softmax(rng.normal(size=(3, 4, 10, 10)) * 3) for _ in range(5)]
    joint = inspect.rollout(weights)
    assert joint.shape == (3, 10, 10)
    assert (joint >= 0).all()
    np.testing.assert_allclose(joint.sum(-1), 1.0, atol=1e-12)
    # Attention to oneself only: the residual-augmented product is the identity.
    np.testing.assert_allclose(inspect.rollout([np.broadcast_to(np.eye(6), (1, 2, 6, 6))] * 3)[0], np.eye(6))
    # One uniform layer: (U + I) / 2.
    one = inspect.rollout([np.full((1, 1, 5, 5), 0.2)])[0]
    np.testing.assert_allclose(one, (np.full((5, 5), 0.2) + np.eye(5)) / 2)
    with pytest.raises(ValueError, match="at least one block"):
        inspect.rollout([])
    with pytest.raises(ValueError, match=r"\(batch, heads, tokens, tokens\)"):
        inspect.rollout([np.ones((2, 5, 5))])


@pytest.mark.parametrize("kind", ["vit", "hybrid"])
def test_attention_weights_come_from_the_encoder(models, images, kind):
    model = models[kind]
    (weights, grid, pixels), = list(inspect.attention_weights(model, images))
    assert grid == (GRID, GRID) and pixels == (8.0, 8.0)
    assert len(weights) == DEPTH and weights[0].shape == (2, HEADS, 1 + GRID * GRID, 1 + GRID * GRID)
    # First block by hand from the encoder's input: LayerNorm, q/k projections, softmax.
    tokens = keras.ops.convert_to_numpy(
        keras.Model(model.input, model.get_layer("encoder").input)(images)
    ).astype(np.float64)
    block = model.get_layer("encoder").blocks[0]
    gamma, beta = (keras.ops.convert_to_numpy(v) for v in (block.ln_1.gamma, block.ln_1.beta))
    y = (tokens - tokens.mean(-1, keepdims=True)) / np.sqrt(tokens.var(-1, keepdims=True) + 1e-6) * gamma + beta
    qkv = y @ keras.ops.convert_to_numpy(block.attention.qkv.kernel) + keras.ops.convert_to_numpy(block.attention.qkv.bias)
    q, k = (qkv[..., i * DIM : (i + 1) * DIM].reshape(2, -1, HEADS, DIM // HEADS).transpose(0, 2, 1, 3) for i in (0, 1))
    expected = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(DIM // HEADS))
    np.testing.assert_allclose(weights[0], expected, atol=1e-5)


@pytest.mark.parametrize("kind", ["vit", "hybrid"])
def test_attention_rollout_maps(models, images, kind):
    maps = inspect.attention_rollout(models[kind], images)
    assert maps.shape == (2, SIZE, SIZE) and maps.dtype == np.float32
    assert (maps >= 0).all() and (maps <= 1 + 1e-6).all()
    np.testing.assert_allclose(maps.max(axis=(1, 2)), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="batch"):
        inspect.attention_rollout(models[kind], images[0])


# ------------------------------------------------------------ attention distance


def test_mean_attention_distance_of_hand_built_patterns():
    n = 4  # a 2x2 grid of 16-pixel patches, plus the class token
    identity = np.broadcast_to(np.eye(n + 1), (3, 2, n + 1, n + 1))
    np.testing.assert_array_equal(inspect.attention_distance([identity], (2, 2), (16, 16)), np.zeros((1, 2)))
    uniform = np.full((3, 2, n + 1, n + 1), 1 / (n + 1))
    # Each patch: itself (0), two neighbours (16) and the diagonal (16 sqrt 2).
    expected = (0 + 16 + 16 + 16 * math.sqrt(2)) / 4
    out = inspect.attention_distance([uniform, identity], (2, 2), (16, 16))
    np.testing.assert_allclose(out, [[expected] * 2, [0, 0]], rtol=1e-12)
    # A 1x3 strip of 8-pixel patches without prefix tokens: pairs at 0, 8 and 16 pixels.
    strip = np.full((1, 1, 3, 3), 1 / 3)
    np.testing.assert_allclose(inspect.attention_distance([strip], (1, 3), (8, 8), 0), [[64 / 9]])
    # Each query attends only to the patch to its right (or, for the last, to itself).
    right = np.zeros((1, 1, 3, 3))
    right[0, 0, [0, 1, 2], [1, 2, 2]] = 1
    np.testing.assert_allclose(inspect.attention_distance([right], (1, 3), (8, 8), 0), [[16 / 3]])
    with pytest.raises(ValueError, match="do not match a 3x3 grid"):
        inspect.attention_distance([uniform], (3, 3), (16, 16))


@pytest.mark.parametrize("kind", ["vit", "hybrid"])
def test_mean_attention_distance_of_uniform_model(models, images, kind):
    model = models[kind]
    saved = model.get_weights()
    try:
        uniform_attention(model)
        distances = inspect.mean_attention_distance(model, images, batch_size=1)
    finally:
        model.set_weights(saved)
    assert distances.shape == (DEPTH, HEADS)
    np.testing.assert_allclose(distances, grid_mean_distance(GRID, GRID, 8), rtol=1e-5)


# ---------------------------------------------------------------- embeddings


def sinusoidal_2d(rows, cols, dim):
    """2-D sine-cosine position embeddings (half the width for rows, half for columns)."""
    quarter = dim // 4
    freq = 1.0 / 10000 ** (np.arange(quarter) / quarter)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    parts = [f(pos.reshape(-1, 1) * freq) for pos in (r, c) for f in (np.sin, np.cos)]
    return np.concatenate(parts, axis=1)


def test_position_embedding_similarity(models, rng):
    model = models["vit"]
    layer = model.get_layer("posembed_input")
    saved = keras.ops.convert_to_numpy(layer.embeddings)
    table = np.concatenate([rng.normal(size=(1, DIM)), sinusoidal_2d(GRID, GRID, DIM)])[None].astype(np.float32)
    try:
        layer.embeddings.assign(table)
        sim = inspect.position_embedding_similarity(model)
    finally:
        layer.embeddings.assign(saved)
    assert sim.shape == (GRID, GRID, GRID, GRID)
    flat = sim.reshape(GRID * GRID, GRID * GRID)
    np.testing.assert_allclose(np.diag(flat), 1.0, rtol=1e-6)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    a, b = table[0, 1 + 1 * GRID + 2], table[0, 1 + 3 * GRID + 0]
    np.testing.assert_allclose(sim[1, 2, 3, 0], a @ b / np.linalg.norm(a) / np.linalg.norm(b), rtol=1e-5)
    # Structured embeddings: similarity falls with distance along a row and a column.
    assert sim[0, 0, 0, 1] > sim[0, 0, 0, 2] > sim[0, 0, 0, 3]
    assert sim[0, 0, 1, 0] > sim[0, 0, 2, 0] > sim[0, 0, 3, 0]


def test_patch_embedding_components(models):
    from sklearn.decomposition import PCA

    model = models["vit"]
    components = inspect.patch_embedding_components(model, k=6)
    assert components.shape == (6, 8, 8, 3)
    flat = components.reshape(6, -1).astype(np.float64)
    np.testing.assert_allclose(flat @ flat.T, np.eye(6), atol=1e-5)
    filters = keras.ops.convert_to_numpy(model.get_layer("embedding").kernel).reshape(-1, DIM).T
    reference = PCA(n_components=6, svd_solver="full").fit(filters.astype(np.float64)).components_
    np.testing.assert_allclose(np.abs(np.sum(flat * reference, axis=1)), 1.0, atol=1e-4)
    assert (flat[np.arange(6), np.abs(flat).argmax(1)] > 0).all()  # deterministic signs
    with pytest.raises(ValueError, match="k=33 must be an integer from 1 to 32"):
        inspect.patch_embedding_components(model, k=33)
    with pytest.raises(ValueError, match="hybrid"):
        inspect.patch_embedding_components(models["hybrid"])


def test_inspect_rejects_other_models():
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="mlp")
    with pytest.raises(ValueError, match="no layer 'posembed_input'"):
        inspect.position_embedding_similarity(other)


# ------------------------------------------------------------------- pictures


def assert_png(path, min_size=(100, 100)):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 2000
    with Image.open(path) as image:
        assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1]
        pixels = np.asarray(image.convert("RGB"), np.float32)
    assert pixels.std() > 5  # not a blank canvas


def test_plots_write_pngs(tmp_path, rng):
    images = rng.uniform(0, 255, size=(2, SIZE, SIZE, 3))
    maps = rng.uniform(0, 1, size=(2, SIZE, SIZE))
    sim = rng.uniform(-1, 1, size=(3, 3, 3, 3))
    figures = {
        "rollout.png": inspect.plot_attention_rollout(images, maps),
        "distance.png": inspect.plot_mean_attention_distance(rng.uniform(0, 200, size=(12, 12)), image_size=224),
        "similarity.png": inspect.plot_position_embedding_similarity(sim),
        "filters.png": inspect.plot_patch_embedding_components(rng.normal(size=(28, 16, 16, 3))),
    }
    for name, figure in figures.items():
        assert inspect.save_figure(figure, tmp_path / "out" / name) == str(tmp_path / "out" / name)
        assert_png(tmp_path / "out" / name)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(figures)  # no temporary files left
    with pytest.raises(ValueError, match="must match"):
        inspect.plot_attention_rollout(images, maps[:1])
    with pytest.raises(ValueError, match=r"\(rows, cols, rows, cols\)"):
        inspect.plot_position_embedding_similarity(sim[0])
    with pytest.raises(ValueError, match=r"\(layers, heads\)"):
        inspect.plot_mean_attention_distance(np.ones(3))
    with pytest.raises(ValueError, match=r"\(k, P, P, 3\)"):
        inspect.plot_patch_embedding_components(np.ones((4, 8, 8)))


def test_inspect_command(models, tmp_path, rng, capsys):
    image_path = tmp_path / "cat.png"
    Image.fromarray(rng.integers(0, 255, size=(40, 50, 3), dtype=np.uint8)).save(image_path)
    for kind, expected in (
        ("vit", {"attention_rollout.png", "mean_attention_distance.png", "position_embedding_similarity.png",
                 "embedding_filters.png"}),
        ("hybrid", {"attention_rollout.png", "mean_attention_distance.png", "position_embedding_similarity.png"}),
    ):
        saved = tmp_path / f"{kind}.keras"
        models[kind].save(saved)
        out = tmp_path / f"out_{kind}"
        assert main(["inspect", str(image_path), str(image_path), "--model", str(saved), "--out", str(out)]) == 0
        assert {p.name for p in out.iterdir()} == expected
        for name in expected:
            assert_png(out / name)
    assert "skipping the embedding filters" in capsys.readouterr().out
    assert main(["inspect", str(image_path), "--model", "ViTX99", "--out", str(tmp_path / "x")]) == 2
    assert "Unknown model 'ViTX99'" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing.png"), "--model", str(saved), "--out", str(tmp_path / "x")]) == 2
    assert "No image file" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_inspect_command_builds_a_named_variant(tmp_path, rng, capsys):
    """The docs' `keras-vit inspect IMAGE --model VARIANT --out DIR` (the default model is a
    variant too), here at 32 px."""
    image_path = tmp_path / "cat.png"
    Image.fromarray(rng.integers(0, 255, size=(40, 50, 3), dtype=np.uint8)).save(image_path)
    out = tmp_path / "out"
    assert main(["inspect", str(image_path), "--model", "ViTTi16", "--image-size", "32", "--out", str(out)]) == 0
    assert "randomly initialised" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"attention_rollout.png", "mean_attention_distance.png",
                                               "position_embedding_similarity.png", "embedding_filters.png"}


def test_the_rollout_figure_shows_the_map_itself_with_its_range(rng):
    """A nearly flat map (0.84-1.0, as a small model's) looks like the input in the paper's panel:
    the figure adds the map as a heat map with a colour bar, and says its range."""
    images = rng.uniform(0, 255, size=(1, SIZE, SIZE, 3))
    maps = 0.84 + 0.16 * rng.uniform(0, 1, size=(1, SIZE, SIZE))
    figure = inspect.plot_attention_rollout(images, maps)
    titles = [ax.get_title() for ax in figure.axes]
    assert "Input" in titles and f"Attention {maps.min():.2f}-{maps.max():.2f}" in titles
    heat = [image for ax in figure.axes for image in ax.get_images() if image.get_cmap().name == "inferno"]
    assert len(heat) == 1 and heat[0].get_clim() == (maps.min(), maps.max())
    assert any(ax.get_ylabel() == "attention weight" for ax in figure.axes)  # the colour bar


@pytest.mark.parametrize("options, expected, said", [
    (dict(position_embedding="rope"), {"attention_rollout.png", "mean_attention_distance.png", "embedding_filters.png"},
     "skipping the position-embedding similarity: vision_transformer has no position table"),
    (dict(naflex=True, class_token=False, pooling="avg"), None, "is a NaFlex model"),
])
def test_inspect_on_rotary_and_naflex_models(tmp_path, rng, capsys, options, expected, said):
    """Both ended in a traceback (an AttributeError each): a rotary model gets the panels it has, a NaFlex one a line."""
    image_path = tmp_path / "cat.png"
    Image.fromarray(rng.integers(0, 255, size=(40, 50, 3), dtype=np.uint8)).save(image_path)
    VisionTransformer(patch_size=8, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32, input_shape=(32, 32, 3), classes=3,
                      **options).save(tmp_path / "m.keras")
    out = tmp_path / "out"
    code = main(["inspect", str(image_path), "--model", str(tmp_path / "m.keras"), "--out", str(out)])
    captured = capsys.readouterr()
    if expected is None:
        assert code == 2 and said in captured.err and captured.err.count("\n") == 1 and not out.exists()
    else:
        assert code == 0 and said in captured.out and {p.name for p in out.iterdir()} == expected
