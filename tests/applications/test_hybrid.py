"""The hybrid R50+ViT: BiT stem layers, R50ViTB16, and loading its checkpoint layouts.

The references are written here from the math (NumPy, float64): weight standardisation,
GroupNorm, TF 'SAME' padding, the bottleneck units, then the ViT; the timm convention is also
checked against transformers' BitBackbone (an independent implementation of the same CNN).
"""

import math

import keras
import numpy as np
import pytest

from keras_vit import R50ViTB16, VisionTransformer
from keras_vit.layers import ResNetV2Stem, WeightStandardizedConv2D
from keras_vit.layers.resnet import ORIGINAL_NUMERICS, TIMM_NUMERICS
from keras_vit.weights.hybrid import stem_numerics

STAGES, WIDTH, DIM, DEPTH, HEADS, MLP, SIZE, CLASSES = (1, 2), 32, 32, 2, 2, 64, 32, 5
GRID = SIZE // 8  # stride 8 with two stages


# ----------------------------------------------------------------------------- reference


def same_pads(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x, kernel, stride, value=0.0):
    pads = [(0, 0), same_pads(x.shape[1], kernel, stride), same_pads(x.shape[2], kernel, stride), (0, 0)]
    return np.pad(x, pads, constant_values=value)


def conv(x, w, stride):
    """TF 'SAME' convolution, x (B,H,W,C), w HWIO."""
    k = w.shape[0]
    x = pad_same(x, k, stride)
    oh, ow = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[-1]))
    for i in range(k):
        for j in range(k):
            out += x[:, i : i + stride * oh : stride, j : j + stride * ow : stride] @ w[i, j]
    return out


def standardize(w, numerics):
    centred = w - w.mean(axis=(0, 1, 2))
    std = np.sqrt((centred**2).mean(axis=(0, 1, 2)))
    if numerics["conv_epsilon_on_variance"]:
        return centred / np.sqrt(std**2 + numerics["conv_epsilon"])
    return centred / (std + numerics["conv_epsilon"])


def group_norm(x, scale, bias, eps, groups=32):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(x.shape) * scale.reshape(-1) + bias.reshape(-1)


def max_pool_same(x):
    x = pad_same(x, 3, 2, value=-np.inf)
    oh, ow = (x.shape[1] - 3) // 2 + 1, (x.shape[2] - 3) // 2 + 1
    windows = [x[:, i : i + 2 * oh : 2, j : j + 2 * ow : 2] for i in range(3) for j in range(3)]
    return np.max(windows, axis=0)


def reference_stem(images, p, numerics, stages=STAGES):
    def cgn(x, conv_key, gn_key, stride=1):
        y = conv(x, standardize(p[conv_key + "/kernel"], numerics), stride)
        return group_norm(y, p[gn_key + "/scale"], p[gn_key + "/bias"], numerics["norm_epsilon"])

    x = np.maximum(cgn(images, "conv_root", "gn_root", 2), 0)
    x = max_pool_same(x)
    for i, depth in enumerate(stages, 1):
        for j in range(1, depth + 1):
            unit, stride = f"block{i}/unit{j}/", 2 if (i > 1 and j == 1) else 1
            shortcut = cgn(x, unit + "conv_proj", unit + "gn_proj", stride) if j == 1 else x
            y = np.maximum(cgn(x, unit + "conv1", unit + "gn1"), 0)
            y = np.maximum(cgn(y, unit + "conv2", unit + "gn2", stride), 0)
            y = cgn(y, unit + "conv3", unit + "gn3")
            x = np.maximum(shortcut + y, 0)
    return x


def layer_norm(x, scale, bias):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * scale + bias


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def reference_hybrid(images, p, numerics, approximate_gelu):
    """Logits of the hybrid from original-layout parameters `p`."""
    features = reference_stem(images.astype(np.float64), p, numerics)
    x = features @ p["embedding/kernel"][0, 0] + p["embedding/bias"]
    b = x.shape[0]
    x = x.reshape(b, -1, DIM)
    x = np.concatenate([np.broadcast_to(p["cls"], (b, 1, DIM)), x], axis=1)
    x = x + p["Transformer/posembed_input/pos_embedding"]
    for i in range(DEPTH):
        blk, att = f"Transformer/encoderblock_{i}/", f"Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/"
        y = layer_norm(x, p[blk + "LayerNorm_0/scale"], p[blk + "LayerNorm_0/bias"])
        q, k, v = (np.einsum("btd,dhe->bhte", y, p[att + n + "/kernel"]) + p[att + n + "/bias"][:, None]
                   for n in ("query", "key", "value"))
        logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(DIM // HEADS)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        x = x + np.einsum("bhte,hed->btd", weights @ v, p[att + "out/kernel"]) + p[att + "out/bias"]
        mlp = f"Transformer/encoderblock_{i}/MlpBlock_3/"
        y = layer_norm(x, p[blk + "LayerNorm_2/scale"], p[blk + "LayerNorm_2/bias"])
        y = gelu(y @ p[mlp + "Dense_0/kernel"] + p[mlp + "Dense_0/bias"], approximate_gelu)
        x = x + y @ p[mlp + "Dense_1/kernel"] + p[mlp + "Dense_1/bias"]
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])[:, 0]
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    return x @ p["head/kernel"] + p["head/bias"]


# ----------------------------------------------------------------------- checkpoints


def original_params(rng, stages=STAGES, pre_logits=True):
    """A small hybrid checkpoint in the original npz layout, keys and shapes as documented.
    Conv kernels get per-filter offsets and scales, so standardisation matters."""
    p = {}

    def kernel(key, k, cin, cout):
        offset, scale = rng.normal(0, 0.05, cout), rng.uniform(0.02, 0.2, cout)
        p[key + "/kernel"] = rng.normal(size=(k, k, cin, cout)) * scale + offset

    def norm(key, c, shape=None):
        p[key + "/scale"] = 1 + 0.2 * rng.normal(size=shape or c)
        p[key + "/bias"] = 0.2 * rng.normal(size=shape or c)

    def group_norm(key, c):
        norm(key, c, (1, 1, 1, c))  # as in the 2020 files (old flax.nn GroupNorm)

    kernel("conv_root", 7, 3, WIDTH)
    group_norm("gn_root", WIDTH)
    cin = WIDTH
    for i, depth in enumerate(stages, 1):
        mid = WIDTH * 2 ** (i - 1)
        for j in range(1, depth + 1):
            unit = f"block{i}/unit{j}/"
            if j == 1:
                kernel(unit + "conv_proj", 1, cin, 4 * mid)
                group_norm(unit + "gn_proj", 4 * mid)
            for n, (k, a, c) in enumerate(((1, cin, mid), (3, mid, mid), (1, mid, 4 * mid)), 1):
                kernel(unit + f"conv{n}", k, a, c)
                group_norm(unit + f"gn{n}", c)
            cin = 4 * mid
    small = lambda *shape: 0.2 * rng.normal(size=shape)  # noqa: E731
    p["embedding/kernel"], p["embedding/bias"] = small(1, 1, cin, DIM), small(DIM)
    p["cls"] = small(1, 1, DIM)
    p["Transformer/posembed_input/pos_embedding"] = small(1, 1 + GRID * GRID, DIM)
    for i in range(DEPTH):
        blk = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            norm(blk + ln, DIM)
        for n in ("query", "key", "value"):
            p[blk + f"MultiHeadDotProductAttention_1/{n}/kernel"] = small(DIM, HEADS, DIM // HEADS)
            p[blk + f"MultiHeadDotProductAttention_1/{n}/bias"] = small(HEADS, DIM // HEADS)
        p[blk + "MultiHeadDotProductAttention_1/out/kernel"] = small(HEADS, DIM // HEADS, DIM)
        p[blk + "MultiHeadDotProductAttention_1/out/bias"] = small(DIM)
        p[blk + "MlpBlock_3/Dense_0/kernel"], p[blk + "MlpBlock_3/Dense_0/bias"] = small(DIM, MLP), small(MLP)
        p[blk + "MlpBlock_3/Dense_1/kernel"], p[blk + "MlpBlock_3/Dense_1/bias"] = small(MLP, DIM), small(DIM)
    norm("Transformer/encoder_norm", DIM)
    if pre_logits:
        p["pre_logits/kernel"], p["pre_logits/bias"] = small(DIM, DIM), small(DIM)
    p["head/kernel"], p["head/bias"] = small(DIM, CLASSES), small(CLASSES)
    return {k: v.astype(np.float32) for k, v in p.items()}


def timm_state_dict(p):
    """The same checkpoint in timm's `vit_base_r50_s16_*` layout, written from the names."""
    oihw = lambda w: w.transpose(3, 2, 0, 1)  # noqa: E731
    sd = {
        "patch_embed.backbone.stem.conv.weight": oihw(p["conv_root/kernel"]),
        "patch_embed.backbone.stem.norm.weight": p["gn_root/scale"].reshape(-1),
        "patch_embed.backbone.stem.norm.bias": p["gn_root/bias"].reshape(-1),
    }
    for i, depth in enumerate(STAGES, 1):
        for j in range(1, depth + 1):
            unit, mod = f"block{i}/unit{j}/", f"patch_embed.backbone.stages.{i - 1}.blocks.{j - 1}."
            names = [(f"conv{n}", f"gn{n}", f"conv{n}", f"norm{n}") for n in (1, 2, 3)]
            if j == 1:
                names.append(("conv_proj", "gn_proj", "downsample.conv", "downsample.norm"))
            for conv_key, gn_key, conv_mod, norm_mod in names:
                sd[mod + conv_mod + ".weight"] = oihw(p[unit + conv_key + "/kernel"])
                sd[mod + norm_mod + ".weight"] = p[unit + gn_key + "/scale"].reshape(-1)
                sd[mod + norm_mod + ".bias"] = p[unit + gn_key + "/bias"].reshape(-1)
    sd["patch_embed.proj.weight"] = oihw(p["embedding/kernel"])
    sd["patch_embed.proj.bias"] = p["embedding/bias"]
    sd["cls_token"] = p["cls"]
    sd["pos_embed"] = p["Transformer/posembed_input/pos_embedding"]
    for i in range(DEPTH):
        blk, t = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        att = blk + "MultiHeadDotProductAttention_1/"
        sd[t + "norm1.weight"], sd[t + "norm1.bias"] = p[blk + "LayerNorm_0/scale"], p[blk + "LayerNorm_0/bias"]
        sd[t + "attn.qkv.weight"] = np.concatenate(
            [p[att + n + "/kernel"].reshape(DIM, DIM).T for n in ("query", "key", "value")]
        )
        sd[t + "attn.qkv.bias"] = np.concatenate([p[att + n + "/bias"].reshape(DIM) for n in ("query", "key", "value")])
        sd[t + "attn.proj.weight"] = p[att + "out/kernel"].reshape(DIM, DIM).T
        sd[t + "attn.proj.bias"] = p[att + "out/bias"]
        sd[t + "norm2.weight"], sd[t + "norm2.bias"] = p[blk + "LayerNorm_2/scale"], p[blk + "LayerNorm_2/bias"]
        for n, fc in ((0, "fc1"), (1, "fc2")):
            sd[t + f"mlp.{fc}.weight"] = p[blk + f"MlpBlock_3/Dense_{n}/kernel"].T
            sd[t + f"mlp.{fc}.bias"] = p[blk + f"MlpBlock_3/Dense_{n}/bias"]
    sd["norm.weight"], sd["norm.bias"] = p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"]
    sd["head.weight"], sd["head.bias"] = p["head/kernel"].T, p["head/bias"]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in sd.items()}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    rng = np.random.default_rng(7)
    params = original_params(rng)
    folder = tmp_path_factory.mktemp("hybrid")
    npz = folder / "R50+ViT-tiny.npz"
    np.savez(npz, **params)
    images = rng.uniform(-1, 1, size=(2, SIZE, SIZE, 3)).astype(np.float32)
    return params, npz, images


def tiny_hybrid(weights=None, numerics=ORIGINAL_NUMERICS, **kwargs):
    return VisionTransformer(
        1, DIM, DEPTH, HEADS, MLP, weights=weights, input_shape=(SIZE, SIZE, 3), classes=CLASSES,
        classifier_activation=None, stem=ResNetV2Stem(STAGES, width=WIDTH, **numerics), **kwargs,
    )


# ---------------------------------------------------------------------------- tests


def test_stem_shapes_stride_and_config(checkpoint):
    images = checkpoint[2]
    stem = ResNetV2Stem(STAGES, width=WIDTH)
    assert (stem.name, stem.stride, stem.output_channels) == ("stem", 8, 256)
    assert ResNetV2Stem((3, 4, 9)).stride == 16 and ResNetV2Stem(()).stride == 4
    y = keras.ops.convert_to_numpy(stem(images))
    assert y.shape == (2, GRID, GRID, 256) == stem.compute_output_shape(images.shape)
    # TF 'SAME' rounds up: 30 -> 15 -> 8 -> 4 rows, 26 -> 13 -> 7 -> 4 columns.
    assert stem.compute_output_shape((None, 30, 26, 3)) == (None, 4, 4, 256)
    assert tuple(stem.compute_output_spec(keras.KerasTensor((1, 30, 26, 3))).shape) == (1, 4, 4, 256)
    clone = ResNetV2Stem.from_config(stem.get_config())
    clone.build(images.shape)
    clone.set_weights(stem.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(images)), y, rtol=1e-5, atol=1e-5)
    assert clone.get_config() == stem.get_config()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(stages=(1, 0)), "positive unit counts"),
        (dict(width=48), "multiple of groups=32"),
        (dict(width=32, groups=5), "multiple of groups=5"),
    ],
)
def test_stem_rejects_bad_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ResNetV2Stem(**kwargs)


def test_weight_standardized_conv_standardizes_at_run_time():
    rng = np.random.default_rng(1)
    layer = WeightStandardizedConv2D(32, 3, strides=2, epsilon=1e-5)
    x = rng.normal(size=(2, 9, 8, 32)).astype(np.float32)  # odd size: asymmetric 'SAME' padding
    layer.build(x.shape)
    raw = (rng.normal(size=(3, 3, 32, 32)) * 3 + 1).astype(np.float32)
    layer.kernel.assign(raw)
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(out, conv(x.astype(np.float64), standardize(raw, ORIGINAL_NUMERICS), 2), atol=1e-4)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.kernel), raw)  # stored raw


def test_r50_vit_b16_parameter_count_and_shapes():
    try:
        # Variables are created but not initialised: shapes and counts only, in well under a second.
        with keras.StatelessScope(initialize_variables=False):
            model = R50ViTB16(weights=None)
            stem = model.get_layer("stem")
            features = tuple(stem.output.shape)
            posemb = tuple(model.get_layer("posembed_input").embeddings.shape)
            outputs, total, stem_params = tuple(model.output.shape), model.count_params(), stem.count_params()
            big = R50ViTB16(weights=None, include_top=False, pooling="token", input_shape=(384, 384, 3))
            big_shapes = tuple(big.get_layer("stem").output.shape), tuple(big.output.shape)
    finally:
        keras.utils.clear_session()
    # timm's count for vit_base_r50_s16_224 with 1000 classes.
    assert total == 98_659_112
    # The ResNet by hand: weight-standardised convs (no bias) and GroupNorm scale + bias.
    expected_stem, cin = 7 * 7 * 3 * 64 + 2 * 64, 64
    for i, depth in enumerate((3, 4, 9)):
        mid = 64 * 2**i
        expected_stem += cin * 4 * mid + 2 * 4 * mid  # projection
        for j in range(depth):
            a = cin if j == 0 else 4 * mid
            expected_stem += a * mid + 9 * mid * mid + mid * 4 * mid + 2 * (mid + mid + 4 * mid)
        cin = 4 * mid
    assert stem_params == expected_stem == 11_894_848
    assert features == (None, 14, 14, 1024)
    assert posemb == (1, 197, 768)
    assert outputs == (None, 1000)
    assert big_shapes == ((None, 24, 24, 1024), (None, 768))


def test_hybrid_input_size_must_fit_the_stride():
    with pytest.raises(ValueError, match="multiples of the patch size 8"):
        VisionTransformer(1, DIM, DEPTH, HEADS, MLP, input_shape=(36, 36, 3), stem=ResNetV2Stem(STAGES, width=WIDTH))


def test_original_npz_checkpoint_matches_reference(checkpoint):
    params, npz, images = checkpoint
    model = tiny_hybrid(weights=str(npz), representation_size=DIM)
    assert tuple(model.get_layer("embedding").output.shape) == (None, GRID, GRID, DIM)
    assert tuple(model.output.shape) == (None, CLASSES)
    stem = model.get_layer("stem")
    assert stem.conv_root.epsilon == 1e-5 and not stem.conv_root.epsilon_on_variance
    # Kernels are loaded raw; standardisation happens at run time.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(stem.conv_root.kernel), params["conv_root/kernel"])
    expected = reference_hybrid(images, params, ORIGINAL_NUMERICS, approximate_gelu=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(images)), expected, rtol=1e-4, atol=2e-4)


def test_timm_checkpoint_matches_reference_and_transformers_bit(checkpoint, tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.numpy import save_file
    from transformers import BitBackbone, BitConfig

    params, npz, images = checkpoint
    params = {k: v for k, v in params.items() if not k.startswith("pre_logits/")}  # as timm's files
    state = timm_state_dict(params)
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    assert stem_numerics(str(path)) == TIMM_NUMERICS
    assert stem_numerics(str(npz)) == ORIGINAL_NUMERICS
    model = tiny_hybrid(weights=str(path), numerics=TIMM_NUMERICS)
    expected = reference_hybrid(images, params, TIMM_NUMERICS, approximate_gelu=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(images)), expected, rtol=1e-4, atol=2e-4)

    # transformers' BiT in the ViT-hybrid configuration runs timm's convention.
    config = BitConfig(
        layer_type="bottleneck", global_padding="SAME", embedding_dynamic_padding=True, depths=list(STAGES),
        hidden_sizes=[4 * WIDTH * 2**i for i in range(len(STAGES))], embedding_size=WIDTH,
        out_features=[f"stage{len(STAGES)}"],
    )
    bit = BitBackbone(config).eval()
    renames = {"patch_embed.backbone.stem.conv.": "bit.embedder.convolution.",
               "patch_embed.backbone.stem.norm.": "bit.embedder.norm.",
               "patch_embed.backbone.stages.": "bit.encoder.stages."}
    bit_state = {}
    for key, value in state.items():
        for old, new in renames.items():
            if key.startswith(old):
                bit_state[new + key[len(old):].replace(".blocks.", ".layers.")] = torch.from_numpy(value)
    bit.load_state_dict(bit_state, strict=True)
    with torch.no_grad():
        theirs = bit(torch.from_numpy(images.transpose(0, 3, 1, 2))).feature_maps[0].numpy().transpose(0, 2, 3, 1)
    ours = keras.ops.convert_to_numpy(model.get_layer("stem")(images))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_checkpoint_with_other_stages_is_rejected(checkpoint):
    _, npz, _ = checkpoint
    with pytest.raises(ValueError, match="block2/unit2"):
        VisionTransformer(
            1, DIM, DEPTH, HEADS, MLP, weights=str(npz), input_shape=(SIZE, SIZE, 3), classes=CLASSES,
            representation_size=DIM, stem=ResNetV2Stem((1, 1), width=WIDTH),
        )


def test_export_and_convert_use_the_stem_mapping(checkpoint, tmp_path):
    from safetensors.numpy import load_file

    from keras_vit.weights import convert_checkpoint, export

    params, npz, images = checkpoint
    model = tiny_hybrid(weights=str(npz), representation_size=DIM)
    export(model, tmp_path / "out.npz", "npz")
    with np.load(tmp_path / "out.npz") as written:
        assert set(written.files) == set(params)
        for key in params:  # GroupNorm parameters come back as (C,)
            np.testing.assert_array_equal(written[key], params[key].reshape(written[key].shape), err_msg=key)
    # npz -> timm without a model: names and layouts as timm's vit_base_r50_s16 state dict.
    expected = timm_state_dict({k: v for k, v in params.items() if not k.startswith("pre_logits/")})
    convert_checkpoint(str(npz), str(tmp_path / "timm.safetensors"))
    converted = load_file(str(tmp_path / "timm.safetensors"))
    converted = {k: v for k, v in converted.items() if not k.startswith("pre_logits.")}
    assert set(converted) == set(expected)
    for key in expected:
        np.testing.assert_allclose(converted[key], expected[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_r50_builder_takes_the_stem_convention_of_the_checkpoint(checkpoint, tmp_path, monkeypatch):
    from safetensors.numpy import save_file

    import keras_vit.applications.vision_transformer as vision_transformer

    params, npz, _ = checkpoint
    timm_file = tmp_path / "timm.safetensors"
    save_file(timm_state_dict(params), str(timm_file))
    built = {}
    monkeypatch.setattr(vision_transformer, "VisionTransformer", lambda **kwargs: built.update(kwargs))
    expected = {None: ORIGINAL_NUMERICS, str(npz): ORIGINAL_NUMERICS, str(timm_file): TIMM_NUMERICS,
                "imagenet": ORIGINAL_NUMERICS, "vit_base_r50_s16_384.orig_in21k_ft_in1k": TIMM_NUMERICS}
    for weights, numerics in expected.items():
        R50ViTB16(weights=weights)
        stem = built["stem"]
        assert (stem.conv_epsilon, stem.conv_epsilon_on_variance, stem.norm_epsilon) == tuple(numerics.values())
        assert (built["patch_size"], built["hidden_dim"], stem.stages, stem.name) == (1, 768, (3, 4, 9), "stem")


def test_custom_hybrid_weights_file_loads_back(checkpoint, tmp_path):
    from tests.support.models import randomize

    _, _, images = checkpoint
    model = randomize(tiny_hybrid())
    path = tmp_path / "hybrid.weights.h5"
    model.save_weights(path)
    loaded = tiny_hybrid(weights=str(path))
    for saved, restored in zip(model.weights, loaded.weights):
        assert saved.path == restored.path
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored), keras.ops.convert_to_numpy(saved))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)), keras.ops.convert_to_numpy(model(images)), rtol=1e-6, atol=1e-6
    )
