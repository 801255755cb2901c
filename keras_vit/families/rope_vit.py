"""Naver's RoPE-ViT (Heo et al., 2024), timm's `vit_*_patch16_rope[_mixed][_ape]_224.naver_in1k`
ImageNet-1k classifiers (`formats.rope_vit`, Apache-2.0): DeiT III blocks (LayerScale), the class
token, no position table; the axial rotary form (period 100) or RoPE-Mixed (learned frequencies).
The `APE` variants add a learned table of the patches besides the rotations. DeiT's preprocessing."""

from keras_vit.families.records import hub_entries

_ROPE_VIT = dict(patch_size=16, position_embedding="rope", rope_form="axial", rope_theta=100.0, layer_scale_init=1e-5,
                 approximate_gelu=False, layer_norm_epsilon=1e-6, input_size=224, preprocessing="deit")
_ROPE_MIXED = dict(_ROPE_VIT, rope_form="mixed", rope_theta=10.0)
_KINDS = (("", _ROPE_VIT, ""), ("Mixed", _ROPE_MIXED, "_mixed"))
_SIZES = (("S", "small", 384, 12, 6), ("B", "base", 768, 12, 12), ("L", "large", 1024, 24, 16))

MODELS = {
    f"RoPE{kind}{ape}ViT{size}16": dict(base, hidden_dim=d, depth=n, num_heads=h, mlp_dim=4 * d,
                                        **({"rope_absolute": True} if ape else {}))
    for kind, base, _ in _KINDS for ape in ("", "APE") for size, _, d, n, h in _SIZES
}

ENTRIES = [
    entry for size, name, *_ in _SIZES for kind, _, tag in _KINDS for ape in ("", "APE")
    for entry in hub_entries(f"RoPE{kind}{ape}ViT{size}16", "deit", 224, 1000,
                             f"vit_{name}_patch16_rope{tag}{'_ape' if ape else ''}_224.naver_in1k")
]
