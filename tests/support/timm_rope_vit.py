"""An independent torch reference of timm's Naver RoPE-ViT (`eva.py`: `Eva` with
`attn_type='rope'`, `layers/pos_embed_sincos.py`: `build_rotary_pos_embed(in_pixels=False,
grid_indexing='xy')`, `get_mixed_grid` / `get_mixed_freqs`, `rot`, `rope_rotate_half`,
`apply_rot_embed_cat`; `layers/attention.py`: `AttentionRope`), written from timm's formulas for
the tests (timm is not installed here); it runs on timm-named state dicts."""

import numpy as np
import torch
import torch.nn.functional as F


def axial_embed(h, w, head_dim, temperature, reference=None, swap_xy=False):
    """timm's `build_rotary_pos_embed` with `in_pixels=False, grid_indexing='xy'`: `(sin, cos)`,
    each `(h * w, head_dim)`. `swap_xy`: the `'ij'` order (a mutation for the tests)."""
    bands = 1.0 / temperature ** (torch.arange(head_dim // 4, dtype=torch.float32) / (head_dim // 4))
    shape = [h, w] if swap_xy else [w, h]
    ref = None if reference is None else ([reference[0], reference[1]] if swap_xy else [reference[1], reference[0]])
    t = [torch.arange(s, dtype=torch.float32) for s in shape]
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
            swap_xy=False):
    """timm `Eva` (`vit_*_patch16_rope*_224`) logits of the NCHW `image` from the state dict `sd`
    (torch tensors); the keyword flags are mutations for the tests."""
    sd = {k: torch.as_tensor(np.asarray(v)) for k, v in sd.items()}
    x = F.conv2d(image, sd["patch_embed.proj.weight"], sd["patch_embed.proj.bias"],
                 stride=sd["patch_embed.proj.weight"].shape[-1])
    batch, width, h, w = x.shape
    x = torch.cat([sd["cls_token"].expand(batch, -1, -1), x.flatten(2).transpose(1, 2)], dim=1)
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


def state_dict(rng, width=32, depth=2, heads=2, mlp=64, patch=4, classes=5, mixed=False):
    """Random float32 weights under timm's key names for a `vit_*_patch16_rope[_mixed]_224`."""
    sd = {"cls_token": rng.normal(size=(1, 1, width)), "patch_embed.proj.weight": rng.normal(size=(width, 3, patch, patch)) * 0.3,
          "patch_embed.proj.bias": rng.normal(size=(width,)) * 0.1, "norm.weight": 1 + 0.1 * rng.normal(size=(width,)),
          "norm.bias": 0.1 * rng.normal(size=(width,)), "head.weight": rng.normal(size=(classes, width)) * 0.2,
          "head.bias": 0.1 * rng.normal(size=(classes,))}
    for i in range(depth):
        p = f"blocks.{i}."
        sd.update({p + "norm1.weight": 1 + 0.1 * rng.normal(size=(width,)), p + "norm1.bias": 0.1 * rng.normal(size=(width,)),
                   p + "attn.qkv.weight": rng.normal(size=(3 * width, width)) * width ** -0.5,
                   p + "attn.qkv.bias": 0.2 * rng.normal(size=(3 * width,)),
                   p + "attn.proj.weight": rng.normal(size=(width, width)) * width ** -0.5,
                   p + "attn.proj.bias": 0.1 * rng.normal(size=(width,)), p + "gamma_1": 0.5 + 0.1 * rng.normal(size=(width,)),
                   p + "gamma_2": 0.5 + 0.1 * rng.normal(size=(width,)),
                   p + "norm2.weight": 1 + 0.1 * rng.normal(size=(width,)), p + "norm2.bias": 0.1 * rng.normal(size=(width,)),
                   p + "mlp.fc1.weight": rng.normal(size=(mlp, width)) * width ** -0.5, p + "mlp.fc1.bias": 0.1 * rng.normal(size=(mlp,)),
                   p + "mlp.fc2.weight": rng.normal(size=(width, mlp)) * mlp ** -0.5, p + "mlp.fc2.bias": 0.1 * rng.normal(size=(width,))})
    if mixed:  # larger than timm's initial magnitudes, so that every rotation matters
        sd["rope.freqs"] = rng.normal(size=(2, depth, heads, width // heads // 2))
    return {k: np.asarray(v, np.float32) for k, v in sd.items()}
