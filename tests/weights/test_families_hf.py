"""The plain-ViT families beyond the paper (DeiT, DINOv2 with and without registers, SigLIP)
loaded from transformers folders saved with random weights, and from the same weights written
under timm's key names, against transformers' own outputs."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights.containers import write_safetensors
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
             patch_size=8)
TOLERANCE = 1e-5


def _run(model, x):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))


def _save(tmp_path_factory, name, model_class, config, seed):
    folder = tmp_path_factory.mktemp(name)
    model = randomize_family_model(model_class(config), seed)
    model.save_pretrained(folder)
    return str(folder), model


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(np.float32)


def _close(actual, expected):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(actual), expected, atol=TOLERANCE, rtol=0)


@pytest.fixture(scope="module")
def deit(tmp_path_factory):
    config = transformers.DeiTConfig(num_labels=3, **SMALL)
    return _save(tmp_path_factory, "deit", transformers.DeiTForImageClassificationWithTeacher, config, 1)


@pytest.fixture(scope="module")
def dinov2_reg(tmp_path_factory):
    config = transformers.Dinov2WithRegistersConfig(num_register_tokens=3, **SMALL)
    return _save(tmp_path_factory, "dinov2_reg", transformers.Dinov2WithRegistersModel, config, 2)


@pytest.fixture(scope="module")
def siglip(tmp_path_factory):
    config = transformers.SiglipVisionConfig(**SMALL)
    return _save(tmp_path_factory, "siglip", transformers.SiglipVisionModel, config, 3)


def test_deit_distilled_averages_both_heads(deit, x):
    folder, reference = deit
    model = keras_vit.from_checkpoint(folder, classifier_activation=None)
    assert model.get_layer("head_dist") is not None and model.preprocessing == "deit"
    _close(model(x), _run(reference, x).logits.numpy())


def test_deit_classifier_reads_the_class_token_only(tmp_path_factory, x):
    config = transformers.DeiTConfig(num_labels=3, **SMALL)
    folder, reference = _save(tmp_path_factory, "deit_plain", transformers.DeiTForImageClassification, config, 4)
    model = keras_vit.from_checkpoint(folder, classifier_activation=None)
    assert "head_dist" not in [layer.name for layer in model.layers]
    _close(model(x), _run(reference, x).logits.numpy())


def test_dinov2_layer_scale(tmp_path_factory, x):
    folder, reference = _save(tmp_path_factory, "dinov2", transformers.Dinov2Model, transformers.Dinov2Config(**SMALL), 5)
    model = keras_vit.from_checkpoint(folder)
    assert model.preprocessing == "dinov2"
    _close(model(x), _run(reference, x).last_hidden_state.numpy())


def test_dinov2_swiglu(tmp_path_factory, x):
    config = transformers.Dinov2Config(use_swiglu_ffn=True, **SMALL)
    folder, reference = _save(tmp_path_factory, "dinov2_swiglu", transformers.Dinov2Model, config, 6)
    model = keras_vit.from_checkpoint(folder)
    assert model.get_layer("encoder").blocks[0].mlp_kind == "swiglu"
    _close(model(x), _run(reference, x).last_hidden_state.numpy())


def test_dinov2_registers_and_their_features(dinov2_reg, x):
    folder, reference = dinov2_reg
    model = keras_vit.from_checkpoint(folder)
    out = _run(reference, x)
    _close(model(x), out.last_hidden_state.numpy())
    pooled = keras_vit.from_checkpoint(folder, pooling="avg")
    _close(pooled(x), out.last_hidden_state[:, 1 + 3 :].mean(1).numpy())  # registers left out of the mean
    grid = keras_vit.features(model, x, layers=-1, norm=True, grid=True)
    _close(grid.reshape(2, 16, 32), out.last_hidden_state[:, 1 + 3 :].numpy())


def test_siglip_map_head_and_tokens(siglip, x):
    folder, reference = siglip
    out = _run(reference, x)
    model = keras_vit.from_checkpoint(folder)
    assert model.get_layer("encoder").blocks[0].approximate_gelu and model.preprocessing == "siglip"  # gelu_pytorch_tanh
    _close(model(x), out.pooler_output.numpy())
    tokens = keras_vit.from_checkpoint(folder, pooling=None)
    _close(tokens(x), out.last_hidden_state.numpy())


# ---------------------------------------------------------------------------- timm layouts

def _saved(folder):
    """The tensors as transformers saved them (its file names, not its modules' names)."""
    from safetensors.numpy import load_file

    return load_file(f"{folder}/model.safetensors")


def _timm_blocks(sd, layer, depth, names):
    """timm's block keys (`blocks.{i}.norm1`, fused `attn.qkv`, `attn.proj`, `mlp.fc1`, ...)
    of transformers' per-layer keys `layer.format(i)` + `names[...]`."""
    out = {}
    for i in range(depth):
        p = layer.format(i)
        q, k, v = (sd[p + names[n]] for n in ("q", "k", "v"))
        qb, kb, vb = (sd[p + names[n][: -len("weight")] + "bias"] for n in ("q", "k", "v"))
        out[f"blocks.{i}.attn.qkv.weight"] = np.concatenate([q, k, v])
        out[f"blocks.{i}.attn.qkv.bias"] = np.concatenate([qb, kb, vb])
        for timm_name, theirs in names.items():
            if timm_name in ("q", "k", "v"):
                continue
            for suffix in ("weight", "bias") if not timm_name.startswith("ls") else ("gamma",):
                key = theirs if suffix == "gamma" else theirs + suffix
                out[f"blocks.{i}.{timm_name}.{suffix}"] = sd[p + key]
    return out


def _write_timm(tmp_path, tensors):
    path = str(tmp_path / "model.safetensors")
    write_safetensors(path, {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, {"format": "pt"})
    return path


def test_timm_deit_distilled(deit, x, tmp_path):
    folder, reference = deit
    sd = {k[len("deit."):] if k.startswith("deit.") else k: v for k, v in _saved(folder).items()}
    names = {"q": "attention.attention.query.weight", "k": "attention.attention.key.weight",
             "v": "attention.attention.value.weight", "norm1": "layernorm_before.", "norm2": "layernorm_after.",
             "attn.proj": "attention.output.dense.", "mlp.fc1": "intermediate.dense.", "mlp.fc2": "output.dense."}
    tensors = {
        "cls_token": sd["embeddings.cls_token"], "dist_token": sd["embeddings.distillation_token"],
        "pos_embed": sd["embeddings.position_embeddings"],
        "patch_embed.proj.weight": sd["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": sd["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": sd["layernorm.weight"], "norm.bias": sd["layernorm.bias"],
        "head.weight": sd["cls_classifier.weight"], "head.bias": sd["cls_classifier.bias"],
        "head_dist.weight": sd["distillation_classifier.weight"], "head_dist.bias": sd["distillation_classifier.bias"],
        **_timm_blocks(sd, "encoder.layer.{}.", 2, names),
    }
    model = keras_vit.from_checkpoint(_write_timm(tmp_path, tensors), num_heads=2, classifier_activation=None)
    _close(model(x), _run(reference, x).logits.numpy())


def _timm_dinov2_reg(folder):
    """timm's `vit_*_reg4_dinov2` layout of transformers' DINOv2-with-registers file:
    `no_embed_class`, so the class token's position embedding is folded into `cls_token` and
    `pos_embed` has the patch rows only."""
    sd = _saved(folder)
    pos = sd["embeddings.position_embeddings"]
    names = {"q": "attention.attention.query.weight", "k": "attention.attention.key.weight",
             "v": "attention.attention.value.weight", "norm1": "norm1.", "norm2": "norm2.",
             "attn.proj": "attention.output.dense.", "mlp.fc1": "mlp.fc1.", "mlp.fc2": "mlp.fc2.",
             "ls1": "layer_scale1.lambda1", "ls2": "layer_scale2.lambda1"}
    return {
        "cls_token": sd["embeddings.cls_token"] + pos[:, :1], "reg_token": sd["embeddings.register_tokens"],
        "pos_embed": pos[:, 1:],
        "patch_embed.proj.weight": sd["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": sd["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": sd["layernorm.weight"], "norm.bias": sd["layernorm.bias"],
        **_timm_blocks(sd, "encoder.layer.{}.", 2, names),
    }


def test_timm_dinov2_reg_no_embed_class(dinov2_reg, x, tmp_path):
    folder, reference = dinov2_reg
    model = keras_vit.from_checkpoint(_write_timm(tmp_path, _timm_dinov2_reg(folder)), num_heads=2)
    _close(model(x), _run(reference, x).last_hidden_state.numpy())


def test_registers_export_to_timm_as_no_embed_class(dinov2_reg, tmp_path):
    """The export of a model with registers is timm's `no_embed_class` file of the same weights."""
    from safetensors.numpy import load_file

    folder, _ = dinov2_reg
    path = str(tmp_path / "exported.safetensors")
    keras_vit.weights.export(keras_vit.from_checkpoint(folder), path, format="timm")
    exported, expected = load_file(path), _timm_dinov2_reg(folder)
    assert sorted(exported) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(exported[key], value, atol=1e-6, rtol=0, err_msg=key)


def test_timm_siglip_attention_pool(siglip, x, tmp_path):
    folder, reference = siglip
    sd = _saved(folder)
    sd = {k[len("vision_model."):] if k.startswith("vision_model.") else k: v for k, v in sd.items()}
    names = {"q": "self_attn.q_proj.weight", "k": "self_attn.k_proj.weight", "v": "self_attn.v_proj.weight",
             "norm1": "layer_norm1.", "norm2": "layer_norm2.", "attn.proj": "self_attn.out_proj.",
             "mlp.fc1": "mlp.fc1.", "mlp.fc2": "mlp.fc2."}
    in_w, in_b = sd["head.attention.in_proj_weight"], sd["head.attention.in_proj_bias"]
    tensors = {
        "pos_embed": sd["embeddings.position_embedding.weight"][None],
        "patch_embed.proj.weight": sd["embeddings.patch_embedding.weight"],
        "patch_embed.proj.bias": sd["embeddings.patch_embedding.bias"],
        "norm.weight": sd["post_layernorm.weight"], "norm.bias": sd["post_layernorm.bias"],
        "attn_pool.latent": sd["head.probe"],
        "attn_pool.q.weight": in_w[:32], "attn_pool.q.bias": in_b[:32],
        "attn_pool.kv.weight": in_w[32:], "attn_pool.kv.bias": in_b[32:],
        "attn_pool.proj.weight": sd["head.attention.out_proj.weight"],
        "attn_pool.proj.bias": sd["head.attention.out_proj.bias"],
        "attn_pool.norm.weight": sd["head.layernorm.weight"], "attn_pool.norm.bias": sd["head.layernorm.bias"],
        **{f"attn_pool.mlp.{n}.{p}": sd[f"head.mlp.{n}.{p}"] for n in ("fc1", "fc2") for p in ("weight", "bias")},
        **_timm_blocks(sd, "encoder.layers.{}.", 2, names),
    }
    # timm runs SigLIP with its exact GELU; the tanh one of these (transformers) weights is asked for.
    model = keras_vit.from_checkpoint(_write_timm(tmp_path, tensors), num_heads=2, approximate_gelu=True)
    _close(model(x), _run(reference, x).pooler_output.numpy())
