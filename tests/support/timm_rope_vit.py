"""An independent torch reference of timm's Naver RoPE-ViT (`eva.py`: `Eva` with
`attn_type='rope'`, `layers/pos_embed_sincos.py`: `build_rotary_pos_embed(in_pixels=False,
grid_indexing='xy')`, `get_mixed_grid` / `get_mixed_freqs`, `rot`, `rope_rotate_half`,
`apply_rot_embed_cat`; `layers/attention.py`: `AttentionRope`), written from timm's formulas for
the tests (timm is not installed here); it runs on timm-named state dicts. EVA-02: `eva02_forward`."""

import numpy as np
import torch
import torch.nn.functional as F


def axial_embed(h, w, head_dim, temperature, reference=None, swap_xy=False, offset=0.0):
    """timm's `build_rotary_pos_embed` with `in_pixels=False, grid_indexing='xy'`: `(sin, cos)`,
    each `(h * w, head_dim)`. `swap_xy`: the `'ij'` order (a mutation for the tests); `offset`:
    `grid_offset`, added to the indices before the reference scaling."""
    bands = 1.0 / temperature ** (torch.arange(head_dim // 4, dtype=torch.float32) / (head_dim // 4))
    shape = [h, w] if swap_xy else [w, h]
    ref = None if reference is None else ([reference[0], reference[1]] if swap_xy else [reference[1], reference[0]])
    t = [torch.arange(s, dtype=torch.float32) + offset for s in shape]
    if ref is not None:
        t = [x / f * r for x, f, r in zip(t, shape, ref)]
    grid = torch.stack(torch.meshgrid(t, indexing="ij" if swap_xy else "xy"), dim=-1).unsqueeze(-1)
    pos = grid * bands
    sin, cos = pos.sin().reshape(h * w, -1), pos.cos().reshape(h * w, -1)
    return sin.repeat_interleave(2, -1), cos.repeat_interleave(2, -1)


def mixed_embed(freqs, h, w):
    """timm's `get_mixed_grid(grid_indexing='xy')` + `get_mixed_freqs` for one block's
    `(2, heads, head_dim / 2)` frequencies: `(sin, cos)`, each `(heads, h * w, head_dim)`."""
    x_pos, y_pos = torch.meshgrid(torch.arange(w, dtype=torch.float32), torch.arange(h, dtype=torch.float32),
                                  indexing="xy")
    t_x, t_y = x_pos.flatten(), y_pos.flatten()
    combined = t_x.unsqueeze(-1) @ freqs[0].unsqueeze(-2) + t_y.unsqueeze(-1) @ freqs[1].unsqueeze(-2)
    return combined.sin().repeat_interleave(2, -1), combined.cos().repeat_interleave(2, -1)


def rot(x):
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply(x, sin, cos, half=False):
    """`apply_rot_embed_cat` on `(batch, heads, patches, head_dim)`."""
    return x * cos + (rotate_half(x) if half else rot(x)) * sin


def forward(sd, image, heads, mixed=False, temperature=100.0, eps=1e-6, prefix_rotated=False, half=False,
            swap_xy=False, table=True):
    """timm `Eva` (`vit_*_patch16_rope*[_ape]_224`) logits of the NCHW `image` from the state dict `sd`
    (torch tensors); the keyword flags are mutations for the tests. An `_ape` table (`no_embed_class`)
    is added to the patch tokens before the class token is put first."""
    sd = {k: torch.as_tensor(np.asarray(v)) for k, v in sd.items()}
    x = F.conv2d(image, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"],
                 stride=sd["patch_embed.proj.weight"].shape[-1])
    batch, width, h, w = x.shape
    x = x.flatten(2).transpose(1, 2)
    if "pos_embed" in sd and table:
        x = x + resample_pos_embed(sd["pos_embed"], h, w, prefix=0)
    x = torch.cat([sd["cls_token"].expand(batch, -1, -1), x], dim=1)
    head_dim, depth = width // heads, 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    npt = 0 if prefix_rotated else 1
    for i in range(depth):
        p = f"blocks.{i}."
        sin, cos = (mixed_embed(sd["rope.freqs"][:, i], h, w) if mixed
                    else axial_embed(h, w, head_dim, temperature, swap_xy=swap_xy))
        if prefix_rotated:  # the class token rotated too, as the patch at (0, 1) (a mutation)
            sin, cos = (torch.cat([t[..., 1:2, :], t], dim=-2) for t in (sin, cos))
        y = F.layer_norm(x, (width,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], eps)
        qkv = F.linear(y, sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"])
        q, k, v = qkv.reshape(batch, -1, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q = torch.cat([q[:, :, :npt], apply(q[:, :, npt:], sin, cos, half)], dim=2)
        k = torch.cat([k[:, :, :npt], apply(k[:, :, npt:], sin, cos, half)], dim=2)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, -1, width)
        x = x + sd[p + "gamma_1"] * F.linear(y, sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
        y = F.layer_norm(x, (width,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], eps)
        y = F.linear(F.gelu(F.linear(y, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"])),
                     sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
        x = x + sd[p + "gamma_2"] * y
    x = F.layer_norm(x, (width,), sd["norm.weight"], sd["norm.bias"], eps)
    return F.linear(x[:, 0], sd["head.weight"], sd["head.bias"])


def shapes(width, depth, heads, mlp, patch=16, classes=1000, mixed=False):
    """timm's state-dict keys and shapes of a `vit_*_patch16_rope[_mixed]_224` (`eva.py`: `Eva` with
    `attn_type='rope'`, `init_values`, `global_pool='token'`, no `pos_embed`)."""
    out = {"cls_token": (1, 1, width), "patch_embed.proj.weight": (width, 3, patch, patch),
           "patch_embed.proj.bias": (width,), "norm.weight": (width,), "norm.bias": (width,),
           "head.weight": (classes, width), "head.bias": (classes,)}
    for i in range(depth):
        p = f"blocks.{i}."
        out.update({p + name: (width,) for name in ("norm1.weight", "norm1.bias", "attn.proj.bias", "gamma_1",
                                                    "gamma_2", "norm2.weight", "norm2.bias", "mlp.fc2.bias")})
        out.update({p + "attn.qkv.weight": (3 * width, width), p + "attn.qkv.bias": (3 * width,),
                    p + "attn.proj.weight": (width, width), p + "mlp.fc1.weight": (mlp, width), p + "mlp.fc1.bias": (mlp,),
                    p + "mlp.fc2.weight": (width, mlp)})
    if mixed:
        out["rope.freqs"] = (2, depth, heads, width // heads // 2)
    return out


def _random(rng, shapes):
    """Random weights of `shapes` (drawn in their order): norms near 1, LayerScale near 0.5, matrices scaled
    by their fan-in, the patch embedding by 0.3, biases by 0.1, a position table by 0.5."""
    sd = {}
    for key, shape in shapes.items():
        noise = rng.normal(size=shape)
        if key.endswith(("norm1.weight", "norm2.weight", "norm.weight")):
            noise = 1 + 0.1 * noise
        elif "gamma" in key:
            noise = 0.5 + 0.1 * noise
        elif len(shape) == 2:
            noise = noise * shape[1] ** -0.5
        elif key == "patch_embed.proj.weight":
            noise = noise * 0.3
        elif key.endswith("bias"):
            noise = noise * 0.1
        elif key == "pos_embed":
            noise = noise * 0.5
        sd[key] = noise
    return sd


def state_dict(rng, width=32, depth=2, heads=2, mlp=64, patch=4, classes=5, mixed=False, ape_grid=None):
    """Random float32 weights under timm's key names (`shapes`, and an `ape_grid` x `ape_grid` `_ape` table
    where given): norms and LayerScale near 1 / 0.5,
    projections scaled by their fan-in, the mixed frequencies larger than timm's initial ones
    (so that every rotation matters)."""
    sd = _random(rng, shapes(width, depth, heads, mlp, patch, classes, mixed))
    if ape_grid:  # the `_ape` variants' table of the patches only
        sd["pos_embed"] = 0.5 * rng.normal(size=(1, ape_grid * ape_grid, width))
    return {k: np.asarray(v, np.float32) for k, v in sd.items()}


# EVA-02 (timm `eva.py`: `Eva` with `use_rot_pos_emb=True`, `ref_feat_shape=(16, 16)`, `rope_temperature=10000`,
# `rope_grid_indexing='ij'`, `global_pool='avg'` with `fc_norm`; `EvaAttention` (q / v biases, a zero key bias,
# fused or not), `GluMlp` (packed, gate first) or `SwiGLU` (`fc1_g` / `fc1_x`, the inner `norm`);
# `layers/pos_embed.py`: `resample_abs_pos_embed`, bicubic with antialiasing).
EVA02_REFERENCE = (16, 16)


def resample_pos_embed(posemb, h, w, prefix=1):
    """timm's `resample_abs_pos_embed(posemb, (h, w), num_prefix_tokens=prefix)` of a square table."""
    side = int(round((posemb.shape[1] - prefix) ** 0.5))
    if (side, side) == (h, w):
        return posemb
    grid = posemb[:, prefix:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(h, w), mode="bicubic", antialias=True, align_corners=False)
    return torch.cat([posemb[:, :prefix], grid.permute(0, 2, 3, 1).reshape(1, h * w, -1)], dim=1)


def eva02_forward(sd, image, heads, eps=1e-6, indexing="ij", table=True, mlp_norm=True, key_bias=0.0,
                  prefix_rotated=False, attn_norm=True):
    """timm `Eva` logits of an EVA-02 state dict (EVA-CLIP's: its image features, `eva02_shapes(clip=True)`);
    the keywords but `heads` / `eps` are mutations for the tests: 'xy' order, the table left out, the MLP's
    or the attention's inner norm left out, a key bias, the class token rotated."""
    sd = {k: torch.as_tensor(np.asarray(v)) for k, v in sd.items()}
    x = F.conv2d(image, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"],
                 stride=sd["patch_embed.proj.weight"].shape[-1])
    batch, width, h, w = x.shape
    x = torch.cat([sd["cls_token"].expand(batch, -1, -1), x.flatten(2).transpose(1, 2)], dim=1)
    if table:
        x = x + resample_pos_embed(sd["pos_embed"], h, w)
    head_dim, depth = width // heads, 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    sin, cos = axial_embed(h, w, head_dim, 10000.0, EVA02_REFERENCE, swap_xy=indexing == "ij")
    npt = 0 if prefix_rotated else 1
    if prefix_rotated:
        sin, cos = (torch.cat([t[1:2], t]) for t in (sin, cos))
    for i in range(depth):
        p = f"blocks.{i}."
        y = F.layer_norm(x, (width,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], eps)
        k_bias = torch.full((width,), key_bias)
        if p + "attn.qkv.weight" in sd:
            bias = torch.cat([sd[p + "attn.q_bias"], k_bias, sd[p + "attn.v_bias"]])
            q, k, v = F.linear(y, sd[p + "attn.qkv.weight"], bias).reshape(
                batch, -1, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        else:
            q, k, v = (F.linear(y, sd[p + f"attn.{n}_proj.weight"], b).reshape(batch, -1, heads, head_dim).transpose(1, 2)
                       for n, b in (("q", sd[p + "attn.q_proj.bias"]), ("k", k_bias), ("v", sd[p + "attn.v_proj.bias"])))
        q = torch.cat([q[:, :, :npt], apply(q[:, :, npt:], sin, cos)], dim=2)
        k = torch.cat([k[:, :, :npt], apply(k[:, :, npt:], sin, cos)], dim=2)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, -1, width)
        if p + "attn.norm.weight" in sd and attn_norm:  # EVA-CLIP's `scale_attn_inner`
            y = F.layer_norm(y, (width,), sd[p + "attn.norm.weight"], sd[p + "attn.norm.bias"], eps)
        x = x + F.linear(y, sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
        y = F.layer_norm(x, (width,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], eps)
        if p + "mlp.fc1_g.weight" in sd:  # timm's `SwiGLU`: the inner norm before fc2
            y = F.silu(F.linear(y, sd[p + "mlp.fc1_g.weight"], sd[p + "mlp.fc1_g.bias"])) * F.linear(
                y, sd[p + "mlp.fc1_x.weight"], sd[p + "mlp.fc1_x.bias"])
            if mlp_norm:
                y = F.layer_norm(y, y.shape[-1:], sd[p + "mlp.norm.weight"], sd[p + "mlp.norm.bias"], eps)
        else:  # timm's `GluMlp(gate_last=False)`
            gate, value = F.linear(y, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"]).chunk(2, dim=-1)
            y = F.silu(gate) * value
        x = x + F.linear(y, sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
    if "fc_norm.weight" in sd:
        x = F.layer_norm(x[:, 1:].mean(dim=1), (width,), sd["fc_norm.weight"], sd["fc_norm.bias"], eps)
    else:  # EVA-CLIP: the final norm on the tokens, the class token pooled
        x = F.layer_norm(x, (width,), sd["norm.weight"], sd["norm.bias"], eps)[:, 0]
    return F.linear(x, sd["head.weight"], sd["head.bias"])


def eva02_shapes(width, depth, heads, hidden, patch=14, grid=16, classes=1000, unfused=False, clip=False):
    """timm's state-dict keys and shapes of an `eva02_*_patch14_*` (`unfused`: B / L's `qkv_fused=False,
    scale_mlp=True`); `hidden` is `int(width * 4 * 2 / 3)`. `clip`: EVA-CLIP's `eva02_*_clip_*` (B / L's
    layout, the attention's inner `attn.norm`, the final `norm` instead of `fc_norm`, `head` its projection
    to `classes`)."""
    unfused = unfused or clip
    out = {"cls_token": (1, 1, width), "pos_embed": (1, 1 + grid * grid, width),
           "patch_embed.proj.weight": (width, 3, patch, patch), "patch_embed.proj.bias": (width,),
           "fc_norm.weight": (width,), "fc_norm.bias": (width,), "head.weight": (classes, width), "head.bias": (classes,)}
    for i in range(depth):
        p = f"blocks.{i}."
        out.update({p + n: (width,) for n in ("norm1.weight", "norm1.bias", "attn.proj.bias", "norm2.weight",
                                              "norm2.bias", "mlp.fc2.bias")})
        out.update({p + "attn.proj.weight": (width, width), p + "mlp.fc2.weight": (width, hidden)})
        if unfused:
            out.update({p + "attn.q_proj.weight": (width, width), p + "attn.q_proj.bias": (width,),
                        p + "attn.k_proj.weight": (width, width), p + "attn.v_proj.weight": (width, width),
                        p + "attn.v_proj.bias": (width,), p + "mlp.norm.weight": (hidden,), p + "mlp.norm.bias": (hidden,)})
            out.update({p + f"mlp.fc1_{n}.weight": (hidden, width) for n in "gx"})
            out.update({p + f"mlp.fc1_{n}.bias": (hidden,) for n in "gx"})
        else:
            out.update({p + "attn.qkv.weight": (3 * width, width), p + "attn.q_bias": (width,), p + "attn.v_bias": (width,),
                        p + "mlp.fc1.weight": (2 * hidden, width), p + "mlp.fc1.bias": (2 * hidden,)})
        if clip:
            out.update({p + "attn.norm.weight": (width,), p + "attn.norm.bias": (width,)})
    if clip:
        out["norm.weight"], out["norm.bias"] = out.pop("fc_norm.weight"), out.pop("fc_norm.bias")
    return out


def eva02_state_dict(rng, width=32, depth=2, heads=2, hidden=48, patch=4, grid=4, classes=5, unfused=False, clip=False):
    """Random float32 EVA-02 (`clip`: EVA-CLIP) weights under timm's key names (`eva02_shapes`), scaled as
    `state_dict`'s."""
    return {k: np.asarray(v, np.float32) for k, v in _random(rng, eva02_shapes(
        width, depth, heads, hidden, patch, grid, classes, unfused, clip)).items()}


# Perception Encoder core (timm `eva.py`: `vit_pe_core_*`, `Eva` with `attn_type='rope'` (`AttentionRope`: a fused
# `qkv` with its bias), `use_pre_transformer_norm` (`norm_pre`, no patch-embedding bias), `rope_grid_offset=1`,
# `rope_grid_indexing='xy'`, `ref_feat_shape` the native grid, `global_pool='map'` (`AttentionPoolLatent`, 8 heads),
# LayerNorm epsilon 1e-5; the projection as `head` with a zero bias).
def pe_forward(sd, image, heads, pool_heads=8, eps=1e-5, offset=1.0, pre_norm=True):
    """timm `Eva` image features of a PE-core state dict; `offset` / `pre_norm` (and `pool_heads`) are mutations
    for the tests."""
    sd = {k: torch.as_tensor(np.asarray(v)) for k, v in sd.items()}
    x = F.conv2d(image, sd["patch_embed.proj.weight"], stride=sd["patch_embed.proj.weight"].shape[-1])
    batch, width, h, w = x.shape
    x = torch.cat([sd["cls_token"].expand(batch, -1, -1), x.flatten(2).transpose(1, 2)], dim=1)
    x = x + resample_pos_embed(sd["pos_embed"], h, w)
    if pre_norm:
        x = F.layer_norm(x, (width,), sd["norm_pre.weight"], sd["norm_pre.bias"], eps)
    side = int(round((sd["pos_embed"].shape[1] - 1) ** 0.5))
    head_dim, depth = width // heads, 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    sin, cos = axial_embed(h, w, head_dim, 10000.0, (side, side), offset=offset)
    for i in range(depth):
        p = f"blocks.{i}."
        y = F.layer_norm(x, (width,), sd[p + "norm1.weight"], sd[p + "norm1.bias"], eps)
        q, k, v = F.linear(y, sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"]).reshape(
            batch, -1, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q = torch.cat([q[:, :, :1], apply(q[:, :, 1:], sin, cos)], dim=2)
        k = torch.cat([k[:, :, :1], apply(k[:, :, 1:], sin, cos)], dim=2)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, -1, width)
        x = x + F.linear(y, sd[p + "attn.proj.weight"], sd[p + "attn.proj.bias"])
        y = F.layer_norm(x, (width,), sd[p + "norm2.weight"], sd[p + "norm2.bias"], eps)
        x = x + F.linear(F.gelu(F.linear(y, sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"])),
                         sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"])
    x = F.layer_norm(x, (width,), sd["norm.weight"], sd["norm.bias"], eps)
    a, pool_dim = "attn_pool.", width // pool_heads  # timm's `AttentionPoolLatent`
    q = F.linear(sd[a + "latent"], sd[a + "q.weight"], sd[a + "q.bias"]).reshape(1, 1, pool_heads, pool_dim)
    k, v = F.linear(x, sd[a + "kv.weight"], sd[a + "kv.bias"]).reshape(batch, -1, 2, pool_heads, pool_dim).permute(
        2, 0, 3, 1, 4).unbind(0)
    y = F.scaled_dot_product_attention(q.transpose(1, 2).expand(batch, -1, -1, -1), k, v)
    y = F.linear(y.transpose(1, 2).reshape(batch, 1, width), sd[a + "proj.weight"], sd[a + "proj.bias"])
    z = F.layer_norm(y, (width,), sd[a + "norm.weight"], sd[a + "norm.bias"], eps)
    y = y + F.linear(F.gelu(F.linear(z, sd[a + "mlp.fc1.weight"], sd[a + "mlp.fc1.bias"])),
                     sd[a + "mlp.fc2.weight"], sd[a + "mlp.fc2.bias"])
    return F.linear(y[:, 0], sd["head.weight"], sd["head.bias"])


def pe_shapes(width, depth, mlp, patch=16, grid=14, projection=1024):
    """timm's state-dict keys and shapes of a `vit_pe_core_*` (the pool's MLP as wide as the blocks')."""
    out = {"cls_token": (1, 1, width), "pos_embed": (1, 1 + grid * grid, width),
           "patch_embed.proj.weight": (width, 3, patch, patch), "norm_pre.weight": (width,), "norm_pre.bias": (width,),
           "norm.weight": (width,), "norm.bias": (width,), "attn_pool.latent": (1, 1, width),
           "attn_pool.q.weight": (width, width), "attn_pool.q.bias": (width,), "attn_pool.kv.weight": (2 * width, width),
           "attn_pool.kv.bias": (2 * width,), "attn_pool.proj.weight": (width, width), "attn_pool.proj.bias": (width,),
           "attn_pool.norm.weight": (width,), "attn_pool.norm.bias": (width,), "attn_pool.mlp.fc1.weight": (mlp, width),
           "attn_pool.mlp.fc1.bias": (mlp,), "attn_pool.mlp.fc2.weight": (width, mlp), "attn_pool.mlp.fc2.bias": (width,),
           "head.weight": (projection, width), "head.bias": (projection,)}
    for i in range(depth):
        p = f"blocks.{i}."
        out.update({p + n: (width,) for n in ("norm1.weight", "norm1.bias", "attn.proj.bias", "norm2.weight",
                                              "norm2.bias", "mlp.fc2.bias")})
        out.update({p + "attn.qkv.weight": (3 * width, width), p + "attn.qkv.bias": (3 * width,),
                    p + "attn.proj.weight": (width, width), p + "mlp.fc1.weight": (mlp, width), p + "mlp.fc1.bias": (mlp,),
                    p + "mlp.fc2.weight": (width, mlp)})
    return out


def pe_state_dict(rng, width=32, depth=2, mlp=64, patch=4, grid=4, projection=24):
    """Random float32 PE-core weights under timm's key names (`pe_shapes`), scaled as `state_dict`'s; the
    projection's bias zero, as timm's conversion writes it."""
    sd = _random(rng, pe_shapes(width, depth, mlp, patch, grid, projection))
    sd["head.bias"] = np.zeros_like(sd["head.bias"])
    return {k: np.asarray(v, np.float32) for k, v in sd.items()}
