"""Test helpers for keras_vit.weights: checkpoints written by hand from the documented layouts
(SPEC.md section 2), and references computed without keras_vit (transformers, plain torch)."""

import json
import os
import shutil
import tempfile
import zipfile

import numpy as np

TINY = dict(patch_size=8, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64)
TINY_IMAGE = 32


def original_npz_params(rng, patch_size=8, hidden_dim=32, depth=2, num_heads=4, mlp_dim=64, grid=(4, 4),
                        classes=5, representation_size=None):
    """Random weights under the exact key names and shapes of the original ViT `.npz` files."""
    d, h, m = hidden_dim, num_heads, mlp_dim

    def normal(*shape, std=1.0):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    params = {
        "embedding/kernel": normal(patch_size, patch_size, 3, d, std=(patch_size * patch_size * 3) ** -0.5),
        "embedding/bias": normal(d, std=0.1),
        "cls": normal(1, 1, d, std=0.5),
        "Transformer/posembed_input/pos_embedding": normal(1, 1 + grid[0] * grid[1], d, std=0.5),
        "Transformer/encoder_norm/scale": 1 + normal(d, std=0.1),
        "Transformer/encoder_norm/bias": normal(d, std=0.1),
    }
    for i in range(depth):
        block = f"Transformer/encoderblock_{i}/"
        attn = block + "MultiHeadDotProductAttention_1/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            params[block + ln + "/scale"] = 1 + normal(d, std=0.1)
            params[block + ln + "/bias"] = normal(d, std=0.1)
        for name in ("query", "key", "value"):
            params[attn + name + "/kernel"] = normal(d, h, d // h, std=d**-0.5)
            params[attn + name + "/bias"] = normal(h, d // h, std=0.1)
        params[attn + "out/kernel"] = normal(h, d // h, d, std=d**-0.5)
        params[attn + "out/bias"] = normal(d, std=0.1)
        params[block + "MlpBlock_3/Dense_0/kernel"] = normal(d, m, std=d**-0.5)
        params[block + "MlpBlock_3/Dense_0/bias"] = normal(m, std=0.1)
        params[block + "MlpBlock_3/Dense_1/kernel"] = normal(m, d, std=m**-0.5)
        params[block + "MlpBlock_3/Dense_1/bias"] = normal(d, std=0.1)
    if representation_size:
        params["pre_logits/kernel"] = normal(d, representation_size, std=d**-0.5)
        params["pre_logits/bias"] = normal(representation_size, std=0.1)
    if classes:
        params["head/kernel"] = normal(representation_size or d, classes, std=d**-0.5)
        params["head/bias"] = normal(classes, std=0.1)
    return params


def hf_state_dict(params, depth):
    """The same numbers as a transformers `ViTModel` state dict (SPEC.md section 2 mapping)."""
    import torch

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a))

    sd = {
        "embeddings.cls_token": t(params["cls"]),
        "embeddings.position_embeddings": t(params["Transformer/posembed_input/pos_embedding"]),
        "embeddings.patch_embeddings.projection.weight": t(params["embedding/kernel"].transpose(3, 2, 0, 1)),
        "embeddings.patch_embeddings.projection.bias": t(params["embedding/bias"]),
        "layernorm.weight": t(params["Transformer/encoder_norm/scale"]),
        "layernorm.bias": t(params["Transformer/encoder_norm/bias"]),
    }
    for i in range(depth):
        block, layer = f"Transformer/encoderblock_{i}/", f"encoder.layer.{i}."
        attn = block + "MultiHeadDotProductAttention_1/"
        d = params[attn + "out/bias"].shape[0]
        for name in ("query", "key", "value"):
            sd[layer + f"attention.attention.{name}.weight"] = t(params[attn + name + "/kernel"].reshape(d, d).T)
            sd[layer + f"attention.attention.{name}.bias"] = t(params[attn + name + "/bias"].reshape(d))
        sd[layer + "attention.output.dense.weight"] = t(params[attn + "out/kernel"].reshape(d, d).T)
        sd[layer + "attention.output.dense.bias"] = t(params[attn + "out/bias"])
        sd[layer + "layernorm_before.weight"] = t(params[block + "LayerNorm_0/scale"])
        sd[layer + "layernorm_before.bias"] = t(params[block + "LayerNorm_0/bias"])
        sd[layer + "layernorm_after.weight"] = t(params[block + "LayerNorm_2/scale"])
        sd[layer + "layernorm_after.bias"] = t(params[block + "LayerNorm_2/bias"])
        sd[layer + "intermediate.dense.weight"] = t(params[block + "MlpBlock_3/Dense_0/kernel"].T)
        sd[layer + "intermediate.dense.bias"] = t(params[block + "MlpBlock_3/Dense_0/bias"])
        sd[layer + "output.dense.weight"] = t(params[block + "MlpBlock_3/Dense_1/kernel"].T)
        sd[layer + "output.dense.bias"] = t(params[block + "MlpBlock_3/Dense_1/bias"])
    if "pre_logits/kernel" in params:
        sd["pooler.dense.weight"] = t(params["pre_logits/kernel"].T)
        sd["pooler.dense.bias"] = t(params["pre_logits/bias"])
    return sd


def hf_reference_logits(params, images, num_heads, image_size, approximate_gelu=True):
    """Logits of a transformers `ViTModel` holding `params` (its pooler is pre_logits), with
    the linear head applied in NumPy. `images` are NHWC."""
    import torch
    from safetensors.torch import save_file
    from transformers import ViTConfig, ViTModel

    kernel = params["embedding/kernel"]
    depth = sum(k.endswith("LayerNorm_0/scale") for k in params)
    config = ViTConfig(
        hidden_size=kernel.shape[-1],
        num_hidden_layers=depth,
        num_attention_heads=num_heads,
        intermediate_size=params["Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias"].shape[0],
        image_size=image_size,
        patch_size=kernel.shape[0],
        layer_norm_eps=1e-6,
        hidden_act="gelu_pytorch_tanh" if approximate_gelu else "gelu",
        pooler_output_size=params.get("pre_logits/bias", np.zeros(kernel.shape[-1])).shape[0],
    )
    has_pre = "pre_logits/kernel" in params
    folder = tempfile.mkdtemp()
    try:  # saved under the hub's key names; transformers maps them to its modules
        config.save_pretrained(folder)
        save_file(hf_state_dict(params, depth), os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        model, info = ViTModel.from_pretrained(folder, add_pooling_layer=has_pre, output_loading_info=True)
    finally:
        shutil.rmtree(folder)
    assert not any(info.values()), info  # every weight was taken, none missing
    model.eval()
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
    features = (out.pooler_output if has_pre else out.last_hidden_state[:, 0]).numpy()
    return features @ params["head/kernel"] + params["head/bias"]


def randomize_family_model(model, seed):
    """O(1) random weights of a transformers family model (DeiT, DINOv2, SigLIP, ...); norm and
    LayerScale weights near 1 but far enough from it to matter."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.ndim >= 2 and name.endswith("weight"):
                p.copy_(noise * p.shape[-1] ** -0.5)
            elif "norm" in name and name.endswith("weight") or name.endswith("lambda1"):
                p.copy_(0.6 + 0.2 * noise)
            else:
                p.copy_(0.3 * noise)
    return model.eval()


def randomize_hf_model(model, seed=0):
    """Re-draws a transformers ViT's weights with O(1) outputs (its own init is tiny)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=generator) * fan_in**-0.5)
            elif "layernorm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=generator))
            elif name.endswith(("cls_token", "position_embeddings")):
                p.copy_(0.5 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
    return model


def timm_reference_logits(state_dict, images, num_heads, eps=1e-6):
    """A plain-torch forward of a timm ViT state dict, written from the documented math
    (exact GELU, fused qkv rows [q; k; v], LayerNorm eps 1e-6). `images` are NHWC. With
    `fc_norm.*` instead of `norm.*` (timm's `fc_norm`), the head reads the LayerNorm of the
    mean of the patch tokens (`global_pool="avg"`), else the normed class token. The block
    options as timm has them: a norm without `bias` is an RMSNorm (`torch.nn.RMSNorm`), a
    projection without `bias` has none, `attn.q_norm` / `attn.k_norm` normalise each head's
    queries / keys (`Attention(qk_norm=True)`)."""
    import torch
    import torch.nn.functional as F

    sd = {k: torch.from_numpy(np.asarray(v)) for k, v in state_dict.items()}

    def norm(t, p):
        if p + "bias" in sd:
            return F.layer_norm(t, t.shape[-1:], sd[p + "weight"], sd[p + "bias"], eps)
        return F.rms_norm(t, t.shape[-1:], sd[p + "weight"], eps)

    def linear(t, p):
        return F.linear(t, sd[p + "weight"], sd.get(p + "bias"))

    x = torch.from_numpy(images).permute(0, 3, 1, 2)
    weight = sd["patch_embed.proj.weight"]
    tokens = F.conv2d(x, weight, sd["patch_embed.proj.bias"], stride=weight.shape[-1]).flatten(2).transpose(1, 2)
    batch, _, width = tokens.shape
    tokens = torch.cat([sd["cls_token"].expand(batch, -1, -1), tokens], dim=1) + sd["pos_embed"]
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    for i in range(depth):
        p = f"blocks.{i}."
        qkv = linear(norm(tokens, p + "norm1."), p + "attn.qkv.")
        q, k, v = qkv.reshape(batch, -1, 3, num_heads, width // num_heads).permute(2, 0, 3, 1, 4)
        if p + "attn.q_norm.weight" in sd:
            q, k = norm(q, p + "attn.q_norm."), norm(k, p + "attn.k_norm.")
        attn = torch.softmax(q @ k.transpose(-1, -2) * (width // num_heads) ** -0.5, dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(batch, -1, width)
        tokens = tokens + linear(y, p + "attn.proj.")
        y = linear(F.gelu(linear(norm(tokens, p + "norm2."), p + "mlp.fc1.")), p + "mlp.fc2.")
        tokens = tokens + y
    if "fc_norm.weight" in sd:
        pooled = norm(tokens[:, 1:].mean(1), "fc_norm.")
    else:
        pooled = norm(tokens, "norm.")[:, 0]
    return F.linear(pooled, sd["head.weight"], sd["head.bias"]).numpy()


def images(rng, batch=2, size=TINY_IMAGE):
    return rng.uniform(-1, 1, size=(batch, size, size, 3)).astype(np.float32)


def edit_keras_config(src, dst, layer_class, field, value):
    """Copies the `.keras` file `src` to `dst` with `field` of every `layer_class` layer's
    config set to `value` (weights unchanged)."""
    with zipfile.ZipFile(src) as source, zipfile.ZipFile(dst, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == layer_class:
                        layer["config"][field] = value
                data = json.dumps(config)
            target.writestr(info.filename, data)
    return dst


def model_of_cached_entry(monkeypatch, family, architecture, entry, state_dict):
    """The model `keras_vit.VisionTransformer(**architecture, weights=entry.name)` builds (16 x 16 px, logits)
    with `architecture` registered as `family`, `entry` as the only named weights and `state_dict` written
    to its cache file as timm's safetensors (no download)."""
    import keras_vit
    from keras_vit.families import FAMILIES
    from keras_vit.weights import registry
    from keras_vit.weights.containers import write_safetensors

    monkeypatch.setitem(FAMILIES, family, architecture)
    monkeypatch.setattr(registry, "ENTRIES", [entry])
    path = registry.cache_path(entry)
    os.makedirs(os.path.dirname(path))
    write_safetensors(path, state_dict, {"format": "pt"})
    args = {k: v for k, v in architecture.items() if k != "input_size"}
    return keras_vit.VisionTransformer(**args, weights=entry.name, classifier_activation=None, input_shape=(16, 16, 3))
