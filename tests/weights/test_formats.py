"""Loading and exporting every checkpoint family, checked against transformers and torch."""

import json
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import export
from keras_vit.weights.containers import write_safetensors
from tests.support.checkpoints import (
    TINY,
    TINY_IMAGE,
    hf_reference_logits,
    images,
    original_npz_params,
    randomize_hf_model,
    timm_reference_logits,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def logits(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))


def hf_logits(folder, x):
    model = transformers.ViTForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()


def save_hf(folder, seed, **config):
    config = transformers.ViTConfig(layer_norm_eps=1e-6, hidden_act="gelu", **config)
    model = randomize_hf_model(transformers.ViTForImageClassification(config).eval(), seed)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_b16(tmp_path_factory):
    return save_hf(tmp_path_factory.mktemp("hf_b16"), 1, num_labels=10)


@pytest.fixture(scope="module")
def hf_tiny(tmp_path_factory):
    return save_hf(
        tmp_path_factory.mktemp("hf_tiny"), 2, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, image_size=TINY_IMAGE, patch_size=8, num_labels=5,
    )


def test_hf_b16_loads_and_exports_back(hf_b16, tmp_path, rng):
    x = images(rng, batch=1, size=224)
    reference = hf_logits(hf_b16, x)
    model = keras_vit.ViTB16(weights=str(hf_b16), classes=10, classifier_activation=None)
    assert model.get_layer("encoder").blocks[0].approximate_gelu is False  # transformers' exact GELU
    out = logits(model, x)
    assert np.abs(reference).max() > 0.5  # the comparison is not between near-zero numbers
    np.testing.assert_allclose(out, reference, atol=1e-4, rtol=0)
    export(model, tmp_path / "back", format="hf")
    np.testing.assert_allclose(hf_logits(tmp_path / "back", x), reference, atol=1e-4, rtol=0)


def test_b16_weights_into_l16_name_keys_and_shapes(hf_b16):
    with pytest.raises(ValueError) as info:
        keras_vit.ViTL16(weights=str(hf_b16), classes=10)
    message = str(info.value)
    assert "'vit.embeddings.patch_embeddings.projection.weight'" in message
    assert "(16, 16, 3, 768), the model expects (16, 16, None, 1024)" in message
    assert "MultiHeadDotProductAttention_1/query/kernel" in message and "(768, 12, 64)" in message
    assert "12 encoder blocks" in message and "the model has 24" in message


def test_hf_small_variant_round_trip(hf_tiny, tmp_path, rng):
    x = images(rng)
    reference = hf_logits(hf_tiny, x)
    model = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(hf_tiny))
    np.testing.assert_allclose(logits(model, x), reference, atol=1e-5, rtol=0)
    export(model, tmp_path / "back", format="hf")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (config["hidden_act"], config["num_attention_heads"], config["image_size"]) == ("gelu", 4, TINY_IMAGE)
    np.testing.assert_allclose(hf_logits(tmp_path / "back", x), reference, atol=1e-5, rtol=0)


def test_hf_single_weights_file_and_torch_bin(hf_tiny, tmp_path, rng):
    """A bare model.safetensors (config.json alongside), a pytorch_model.bin state dict, shards."""
    x = images(rng)
    reference = hf_logits(hf_tiny, x)
    file_model = keras_vit.VisionTransformer(
        **TINY, classes=5, classifier_activation=None, weights=str(hf_tiny / "model.safetensors")
    )
    np.testing.assert_allclose(logits(file_model, x), reference, atol=1e-5, rtol=0)
    state = transformers.ViTForImageClassification.from_pretrained(hf_tiny).state_dict()
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text((hf_tiny / "config.json").read_text())
    bin_model = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(tmp_path))
    np.testing.assert_allclose(logits(bin_model, x), reference, atol=1e-5, rtol=0)
    sharded = tmp_path / "sharded"
    transformers.ViTForImageClassification.from_pretrained(hf_tiny).save_pretrained(sharded, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").exists()
    sharded_model = keras_vit.VisionTransformer(**TINY, classes=5, classifier_activation=None, weights=str(sharded))
    np.testing.assert_allclose(logits(sharded_model, x), reference, atol=1e-5, rtol=0)


@pytest.fixture
def npz_params(rng):
    return original_npz_params(rng, **TINY, classes=7, representation_size=24)


def test_handwritten_original_npz_matches_transformers(npz_params, tmp_path, rng):
    path = tmp_path / "ViT-tiny.npz"
    np.savez(path, **npz_params)
    x = images(rng)
    model = keras_vit.VisionTransformer(
        **TINY, classes=7, representation_size=24, classifier_activation=None, weights=str(path)
    )
    assert model.get_layer("encoder").blocks[0].approximate_gelu is True  # the original's tanh GELU
    reference = hf_reference_logits(npz_params, x, TINY["num_heads"], TINY_IMAGE, approximate_gelu=True)
    np.testing.assert_allclose(logits(model, x), reference, atol=1e-5, rtol=0)
    exact = keras_vit.VisionTransformer(
        **TINY, classes=7, representation_size=24, classifier_activation=None, weights=str(path),
        approximate_gelu=False,
    )
    reference = hf_reference_logits(npz_params, x, TINY["num_heads"], TINY_IMAGE, approximate_gelu=False)
    np.testing.assert_allclose(logits(exact, x), reference, atol=1e-5, rtol=0)


def test_npz_round_trip_is_bit_exact(npz_params, tmp_path):
    np.savez(tmp_path / "in.npz", **npz_params)
    model = keras_vit.VisionTransformer(**TINY, classes=7, representation_size=24, weights=str(tmp_path / "in.npz"))
    export(model, tmp_path / "out.npz", format="npz")
    with np.load(tmp_path / "out.npz", allow_pickle=False) as out:
        assert set(out.files) == set(npz_params)
        for key, value in npz_params.items():
            assert out[key].dtype == np.float32 and np.array_equal(out[key], value), key


def _variant_files(params, tmp_path):
    """The same weights in the layouts of SPEC.md section 2 'variants seen in the wild'."""
    files = {"opt_target": {"opt/target/" + k: v for k, v in params.items()}}
    files["opt_target"]["opt/state/step"] = np.array(3)  # optimizer state is ignored
    linen = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
             "MlpBlock_3": "MlpBlock_0"}
    big_vision = {}
    for key, value in params.items():
        if key == "Transformer/posembed_input/pos_embedding":
            big_vision["params/pos_embedding"] = value[:, 1:]  # big_vision: no class-token row
            continue
        parts = [linen.get(p, p) for p in key.split("/")]
        big_vision["params/" + "/".join(parts)] = value
    files["big_vision"] = big_vision
    scanned = {k: v for k, v in params.items() if "encoderblock_" not in k}
    for key in [k for k in params if k.startswith("Transformer/encoderblock_0/")]:
        stacked = np.stack([params[key.replace("_0/", f"_{i}/", 1)] for i in range(TINY["depth"])])
        scanned[key.replace("encoderblock_0/", "encoderblock/")] = stacked
    files["scanned"] = scanned
    paths = {}
    for name, arrays in files.items():
        paths[name] = tmp_path / f"{name}.npz"
        save = np.savez_compressed if name == "scanned" else np.savez  # both zip flavours
        save(paths[name], **arrays)
    return paths


def test_npz_variants_load_identically(npz_params, tmp_path, rng):
    x = images(rng)
    build = dict(**TINY, classes=7, representation_size=24, classifier_activation=None)
    np.savez(tmp_path / "plain.npz", **npz_params)
    expected = logits(keras_vit.VisionTransformer(**build, weights=str(tmp_path / "plain.npz")), x)
    zero_class_row = dict(npz_params)
    zero_class_row["Transformer/posembed_input/pos_embedding"] = npz_params[
        "Transformer/posembed_input/pos_embedding"].copy()
    zero_class_row["Transformer/posembed_input/pos_embedding"][:, 0] = 0
    np.savez(tmp_path / "zero_row.npz", **zero_class_row)
    expected_bv = logits(keras_vit.VisionTransformer(**build, weights=str(tmp_path / "zero_row.npz")), x)
    for name, path in _variant_files(npz_params, tmp_path).items():
        out = logits(keras_vit.VisionTransformer(**build, weights=str(path)), x)
        np.testing.assert_array_equal(out, expected_bv if name == "big_vision" else expected, err_msg=name)


def test_bfloat16_npz(npz_params, tmp_path, rng):
    """JAX writes bfloat16 arrays as 2-byte void ('|V2'); they load as float32."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in npz_params.items()}
    np.savez(tmp_path / "bf16.npz", **bf16)
    with zipfile.ZipFile(tmp_path / "bf16.npz") as zf:
        assert b"'descr': '<V2'" in zf.read("cls.npy")[:80]
    np.savez(tmp_path / "rounded.npz", **{k: v.astype(np.float32) for k, v in bf16.items()})
    x = images(rng)
    build = dict(**TINY, classes=7, representation_size=24, classifier_activation=None)
    out = logits(keras_vit.VisionTransformer(**build, weights=str(tmp_path / "bf16.npz")), x)
    ref = logits(keras_vit.VisionTransformer(**build, weights=str(tmp_path / "rounded.npz")), x)
    np.testing.assert_array_equal(out, ref)


def test_timm_export_layout_and_forward(npz_params, tmp_path, rng):
    from safetensors.numpy import load_file

    np.savez(tmp_path / "in.npz", **npz_params)
    model = keras_vit.VisionTransformer(
        **TINY, classes=7, classifier_activation=None, approximate_gelu=False, weights=str(tmp_path / "in.npz")
    )
    export(model, tmp_path / "timm.safetensors", format="timm")
    state = load_file(tmp_path / "timm.safetensors")
    d, p, m = TINY["hidden_dim"], TINY["patch_size"], TINY["mlp_dim"]
    expected_shapes = {
        "cls_token": (1, 1, d), "pos_embed": (1, 17, d), "patch_embed.proj.weight": (d, 3, p, p),
        "blocks.1.attn.qkv.weight": (3 * d, d), "blocks.1.attn.qkv.bias": (3 * d,),
        "blocks.1.attn.proj.weight": (d, d), "blocks.1.mlp.fc1.weight": (m, d), "blocks.1.mlp.fc2.weight": (d, m),
        "blocks.0.norm1.weight": (d,), "blocks.0.norm2.bias": (d,), "norm.weight": (d,), "head.weight": (7, d),
    }
    assert {k: state[k].shape for k in expected_shapes} == expected_shapes
    assert len(state) == 4 + 12 * TINY["depth"] + 2 + 2
    q_rows = npz_params["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"].reshape(d, d).T
    np.testing.assert_array_equal(state["blocks.1.attn.qkv.weight"][:d], q_rows)
    x = images(rng)
    reference = timm_reference_logits(state, x, TINY["num_heads"])
    np.testing.assert_allclose(logits(model, x), reference, atol=1e-5, rtol=0)
    again = keras_vit.VisionTransformer(**TINY, classes=7, classifier_activation=None, weights=str(tmp_path / "timm.safetensors"))
    assert again.get_layer("encoder").blocks[0].approximate_gelu is False  # timm runs exact GELU
    np.testing.assert_allclose(logits(again, x), reference, atol=1e-5, rtol=0)


def test_timm_fc_norm_loads_and_exports(npz_params, tmp_path, rng):
    """timm's `fc_norm` (its `global_pool="avg"` models): the final LayerNorm on the mean of the
    patch tokens, none on the tokens; the file has `fc_norm.*` where others have `norm.*`."""
    from safetensors.numpy import load_file

    np.savez(tmp_path / "in.npz", **npz_params)
    plain = keras_vit.VisionTransformer(**TINY, classes=7, approximate_gelu=False, weights=str(tmp_path / "in.npz"))
    export(plain, tmp_path / "plain.safetensors", format="timm")
    state = {("fc_" + k if k.startswith("norm.") else k): v for k, v in load_file(tmp_path / "plain.safetensors").items()}
    path = str(tmp_path / "fc_norm.safetensors")
    write_safetensors(path, state, {"format": "pt"})
    x = images(rng)
    model = keras_vit.from_checkpoint(path, num_heads=TINY["num_heads"], classifier_activation=None)
    assert model.get_layer("encoder").encoder_norm is None and model.get_layer("pooling").mode == "avg"
    np.testing.assert_allclose(logits(model, x), timm_reference_logits(state, x, TINY["num_heads"]), atol=1e-5, rtol=0)
    export(model, tmp_path / "back.safetensors", format="timm")
    back = load_file(tmp_path / "back.safetensors")
    assert sorted(back) == sorted(state) and all(np.array_equal(back[k], state[k]) for k in state)
    model.save(tmp_path / "fc_norm.keras")
    np.testing.assert_allclose(logits(keras.saving.load_model(tmp_path / "fc_norm.keras"), x), logits(model, x), atol=1e-6)
    with pytest.raises(ValueError, match="final LayerNorm is on the pooled features \\(fc_norm\\), the model's on the tokens"):
        keras_vit.VisionTransformer(**TINY, classes=7, pooling="avg", weights=path)
    with pytest.raises(ValueError, match="fc_norm=True normalises the pooled features; the MAP head"):
        keras_vit.VisionTransformer(**TINY, class_token=False, pooling="map", fc_norm=True)


def test_timm_pth_and_keras_formats(npz_params, tmp_path, rng):
    np.savez(tmp_path / "in.npz", **npz_params)
    build = dict(**TINY, classes=7, representation_size=24, classifier_activation=None)
    model = keras_vit.VisionTransformer(**build, weights=str(tmp_path / "in.npz"))
    x = images(rng)
    expected = logits(model, x)
    export(model, tmp_path / "timm.safetensors", format="timm")
    from safetensors.torch import load_file

    torch.save({"state_dict": load_file(tmp_path / "timm.safetensors"), "epoch": 3}, tmp_path / "ckpt.pth")
    model.save(str(tmp_path / "model.keras"))
    model.save_weights(str(tmp_path / "model.weights.h5"))
    for name in ("ckpt.pth", "model.keras", "model.weights.h5"):
        loaded = keras_vit.VisionTransformer(**build, approximate_gelu=True, weights=str(tmp_path / name))
        np.testing.assert_allclose(logits(loaded, x), expected, atol=1e-6, rtol=0, err_msg=name)


def test_format_comes_from_content_not_name(npz_params, tmp_path, rng):
    np.savez(tmp_path / "in.npz", **npz_params)
    (tmp_path / "in.npz").rename(tmp_path / "weights.bin")
    model = keras_vit.VisionTransformer(**TINY, classes=7, representation_size=24, weights=str(tmp_path / "weights.bin"))
    assert model.get_layer("encoder").blocks[0].approximate_gelu is True  # read as the original npz
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="unrecognised checkpoint format"):
        keras_vit.VisionTransformer(**TINY, weights=str(tmp_path / "junk.npz"))


def test_convert_command(npz_params, tmp_path, rng, capsys):
    from keras_vit.cli import main

    np.savez(tmp_path / "trained.npz", **npz_params)
    assert main(["convert", str(tmp_path / "trained.npz"), str(tmp_path / "no"), "--format", "hf"]) == 2
    assert "cannot hold both a pre_logits layer" in capsys.readouterr().err
    npz_params = dict(npz_params, **{"head/kernel": np.zeros((24, 7), np.float32), "head/bias": np.zeros(7, np.float32)})
    np.savez(tmp_path / "in.npz", **npz_params)  # like the ImageNet-21k files: pre_logits, zero head
    assert main(["convert", str(tmp_path / "in.npz"), str(tmp_path / "hf_dir"), "--format", "hf"]) == 0
    config = json.loads((tmp_path / "hf_dir" / "config.json").read_text())
    assert config["architectures"] == ["ViTModel"] and config["hidden_act"] == "gelu_pytorch_tanh"
    assert main(["convert", str(tmp_path / "hf_dir"), str(tmp_path / "back.npz")]) == 0
    with np.load(tmp_path / "back.npz") as back:
        assert set(back.files) == set(npz_params) - {"head/kernel", "head/bias"}  # the zero head is left out
        for key in back.files:
            np.testing.assert_array_equal(back[key], npz_params[key])
    assert main(["convert", str(tmp_path / "in.npz"), str(tmp_path / "x.keras")]) == 0
    x = images(rng)
    model = keras_vit.VisionTransformer(**TINY, classes=7, representation_size=24, weights=str(tmp_path / "x.keras"))
    ref = keras_vit.VisionTransformer(**TINY, classes=7, representation_size=24, weights=str(tmp_path / "in.npz"))
    np.testing.assert_allclose(logits(model, x), logits(ref, x), atol=1e-6)
    assert main(["convert", str(tmp_path / "missing.npz"), str(tmp_path / "y.npz")]) == 2
    assert "No checkpoint file or folder" in capsys.readouterr().err


def test_convert_without_the_head_writes_what_transformers_reads(tmp_path, capsys):
    """A recipe's average-pooling model (the digits default) has no transformers head: refused in one line
    naming --include-top false, which writes the encoder; transformers' ViTModel gives its tokens."""
    from keras_vit.cli import main

    model = keras_vit.VisionTransformer(**TINY, pooling="avg", classes=5, input_shape=(TINY_IMAGE, TINY_IMAGE, 3),
                                        approximate_gelu=False)
    model.set_weights([np.random.default_rng(1).normal(0, 0.2, w.shape).astype("float32") + (w.path.endswith("gamma"))
                       for w in model.weights])
    model.save(tmp_path / "avg.keras")
    assert main(["convert", str(tmp_path / "avg.keras"), str(tmp_path / "hf"), "--format", "hf"]) == 2
    assert "--include-top false" in capsys.readouterr().err and not (tmp_path / "hf").exists()
    assert main(["convert", str(tmp_path / "avg.keras"), str(tmp_path / "hf"), "--format", "hf", "--include-top", "false"]) == 0
    x = images(np.random.default_rng(2))
    reference = transformers.ViTModel.from_pretrained(tmp_path / "hf", add_pooling_layer=False).eval()
    with torch.no_grad():
        tokens = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).last_hidden_state.numpy()
    np.testing.assert_allclose(keras_vit.features(model, x, -1, norm=True), tokens, atol=2e-5)
