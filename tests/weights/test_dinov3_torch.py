"""DINOv3 from timm's `vit_*_patch16_dinov3*` state dicts (Eva names, key lists from timm's
`eva.py` / `checkpoint_filter_fn`) and Meta's `.pth` files, written here from a random-weight
transformers `DINOv3ViTModel` and checked against its outputs."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights.containers import write_safetensors
from tests.support.checkpoints import randomize_family_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
            patch_size=4, num_register_tokens=4, layer_norm_eps=1e-5)
GATED = dict(use_gated_mlp=True, hidden_act="silu")


def reference_model(options, zero_qv_bias=False):
    model = randomize_family_model(transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**TINY, **options)), 1)
    if zero_qv_bias:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("q_proj.bias", "v_proj.bias")):
                    p.zero_()
    return model


def _blocks(sd):
    return sorted({int(k.split(".")[2]) for k in sd if k.startswith("model.layer.")})


def timm_layout(sd, qkv_bias):
    """timm's Eva DINOv3 names: `reg_token`, fused `qkv` without bias, `q_bias` / `v_bias` in the
    `_qkvb` models, `gamma_1` / `gamma_2`, `mlp.fc1_g` / `fc1_x` / `fc2` for SwiGLU."""
    out = {"cls_token": sd["embeddings.cls_token"], "reg_token": sd["embeddings.register_tokens"],
           "patch_embed.proj.weight": sd["embeddings.patch_embeddings.weight"],
           "patch_embed.proj.bias": sd["embeddings.patch_embeddings.bias"],
           "norm.weight": sd["norm.weight"], "norm.bias": sd["norm.bias"]}
    for i in _blocks(sd):
        hf, p = f"model.layer.{i}.", f"blocks.{i}."
        a = hf + "attention."
        out[p + "attn.qkv.weight"] = np.concatenate([sd[a + f"{n}_proj.weight"] for n in "qkv"])
        if qkv_bias:
            out[p + "attn.q_bias"], out[p + "attn.v_bias"] = sd[a + "q_proj.bias"], sd[a + "v_proj.bias"]
        for theirs, ours in (("o_proj", "attn.proj"), ("norm1", "norm1"), ("norm2", "norm2")):
            out.update({f"{p}{ours}.{w}": sd[f"{hf}{theirs}.{w}".replace("o_proj", "attention.o_proj")]
                        for w in ("weight", "bias")})
        out[p + "gamma_1"], out[p + "gamma_2"] = sd[hf + "layer_scale1.lambda1"], sd[hf + "layer_scale2.lambda1"]
        names = (("gate_proj", "fc1_g"), ("up_proj", "fc1_x"), ("down_proj", "fc2")) if hf + "mlp.gate_proj.weight" in sd \
            else (("up_proj", "fc1"), ("down_proj", "fc2"))
        for theirs, ours in names:
            out.update({f"{p}mlp.{ours}.{w}": sd[f"{hf}mlp.{theirs}.{w}"] for w in ("weight", "bias")})
    return out


def meta_layout(sd, rng):
    """Meta's names: `storage_tokens`, `mask_token`, `rope_embed.periods`, a fused `qkv.bias` whose
    key part (random here) `bias_mask` zeroes, `ls1.gamma`, `mlp.w1` / `w2` / `w3` for SwiGLU."""
    out = timm_layout(sd, qkv_bias=True)
    out["storage_tokens"] = out.pop("reg_token")
    out["mask_token"] = np.zeros((1, TINY["hidden_size"]), np.float32)
    out["rope_embed.periods"] = np.ones(TINY["hidden_size"] // TINY["num_attention_heads"] // 4, np.float32)
    for i in _blocks(sd):
        p = f"blocks.{i}."
        key_bias = rng.normal(size=TINY["hidden_size"]).astype(np.float32)
        out[p + "attn.qkv.bias"] = np.concatenate([out.pop(p + "attn.q_bias"), key_bias, out.pop(p + "attn.v_bias")])
        out[p + "attn.qkv.bias_mask"] = np.repeat([1.0, 0.0, 1.0], TINY["hidden_size"]).astype(np.float32)
        out[p + "ls1.gamma"], out[p + "ls2.gamma"] = out.pop(p + "gamma_1"), out.pop(p + "gamma_2")
        gated = p + "mlp.fc1_g.weight" in out
        for timm_name, meta in (("fc1_g", "w1"), ("fc1_x", "w2"), ("fc2", "w3")) if gated else ():
            for w in ("weight", "bias"):
                out[f"{p}mlp.{meta}.{w}"] = out.pop(f"{p}mlp.{timm_name}.{w}")
    return out


def _check(model, reference):
    for size in ((16, 16), (12, 20)):
        x = np.random.default_rng(0).uniform(-1, 1, (2, *size, 3)).astype(np.float32)
        with torch.no_grad():
            expected = reference(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).last_hidden_state.numpy()
        np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("options", [{}, GATED], ids=["mlp", "swiglu"])
@pytest.mark.parametrize("qkv_bias", [True, False], ids=["qkvb", "no_qkv_bias"])
def test_timm_dinov3_file_matches_transformers(tmp_path, options, qkv_bias):
    reference = reference_model(options, zero_qv_bias=not qkv_bias)
    sd = {k: v.numpy() for k, v in reference.state_dict().items()}
    path = tmp_path / "model.safetensors"
    write_safetensors(str(path), timm_layout(sd, qkv_bias), {"format": "pt"})
    model = keras_vit.from_checkpoint(str(path), num_heads=2, input_shape=(None, None, 3))
    assert model.get_layer("encoder").qkv_bias is qkv_bias
    assert model.preprocessing == "dinov3"
    _check(model, reference)


@pytest.mark.parametrize("options", [{}, GATED], ids=["mlp", "swiglu"])
def test_meta_pth_matches_transformers(tmp_path, options):
    reference = reference_model(options)
    sd = {k: v.numpy() for k, v in reference.state_dict().items()}
    path = tmp_path / "dinov3_vits16_pretrain.pth"
    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in meta_layout(sd, np.random.default_rng(1)).items()},
               path)
    model = keras_vit.from_checkpoint(str(path), num_heads=2, input_shape=(None, None, 3))
    _check(model, reference)


def test_named_timm_dinov3_entry_builds_its_model(tmp_path, monkeypatch):
    """A named entry of timm's layout (its file in the cache: no download) gives the builder its weights,
    preprocessing and DINOv3 licence."""
    from keras_vit.families import FAMILIES
    from keras_vit.weights import WeightsEntry, registry

    architecture = dict(FAMILIES["DINOv3S16"], patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64,
                        input_size=16)
    monkeypatch.setitem(FAMILIES, "DINOv3Test", architecture)
    entry = WeightsEntry("DINOv3Test", "vit_test_patch4_dinov3_qkvb.lvd1689m", 16, None, None, "safetensors",
                         "https://example.invalid/model.safetensors", license="dinov3-license", preprocessing="dinov3")
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    reference = reference_model({})
    sd = {k: v.numpy() for k, v in reference.state_dict().items()}
    path = registry.cache_path(entry)
    os.makedirs(os.path.dirname(path))
    write_safetensors(path, timm_layout(sd, qkv_bias=True), {"format": "pt"})
    args = {k: v for k, v in architecture.items() if k != "input_size"}
    model = keras_vit.VisionTransformer(**args, weights=entry.name, input_shape=(None, None, 3))
    assert model.preprocessing == "dinov3" and "dinov3-license" in registry.weights_table("DINOv3Test")
    _check(model, reference)


@pytest.mark.parametrize("options", [{}, GATED], ids=["mlp", "swiglu"])
@pytest.mark.parametrize("qkv_bias", [True, False], ids=["qkvb", "no_qkv_bias"])
def test_export_writes_timms_dinov3_layout_back(tmp_path, options, qkv_bias):
    from safetensors.numpy import load_file

    sd = {k: v.numpy() for k, v in reference_model(options, zero_qv_bias=not qkv_bias).state_dict().items()}
    original = timm_layout(sd, qkv_bias)
    write_safetensors(str(tmp_path / "in.safetensors"), original, {"format": "pt"})
    model = keras_vit.from_checkpoint(str(tmp_path / "in.safetensors"), num_heads=2)
    keras_vit.weights.export(model, tmp_path / "out.safetensors", format="timm_dinov3")
    written = load_file(str(tmp_path / "out.safetensors"))
    assert written.keys() == original.keys()
    for key, value in original.items():
        np.testing.assert_allclose(written[key], value, atol=1e-7, err_msg=key)


def test_timm_dinov3_export_of_another_model_is_refused_in_one_line(tmp_path):
    model = keras_vit.VisionTransformer(4, 16, 1, 2, 32, input_shape=(8, 8, 3), num_registers=4)
    with pytest.raises(ValueError, match=r"^[^\n]*timm's DINOv3 layout holds rotary models[^\n]*format='timm'"):
        keras_vit.weights.export(model, tmp_path / "out.safetensors", format="timm_dinov3")
    assert not (tmp_path / "out.safetensors").exists()
