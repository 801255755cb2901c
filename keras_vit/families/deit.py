"""DeiT (Touvron et al., 2021), timm's `deit_*` files (Apache-2.0): the distilled models (a
distillation token and a second head) and the plain ones, which are the paper's shapes (their
entries stand under `ViTTi16` / `ViTS16` / `ViTB16` and give DeiT's preprocessing)."""

from keras_vit.families.records import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, hub_entries

_DEIT = dict(patch_size=16, distillation_token=True, approximate_gelu=False, input_size=224, preprocessing="deit")

MODELS = {
    "DeiTTi16": dict(_DEIT, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768),
    "DeiTS16": dict(_DEIT, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DeiTB16": dict(_DEIT, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
}

PREPROCESSING = {
    # timm deit.py: ImageNet mean / std, bicubic, crop_pct 0.9.
    "deit": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bicubic", 0.9),
}

_SIZES = (("tiny", "Ti"), ("small", "S"), ("base", "B"))

ENTRIES = [
    *(entry for size, s in _SIZES for entry in hub_entries(f"ViT{s}16", "deit", 224, 1000,
                                                            f"deit_{size}_patch16_224.fb_in1k")),
    *(entry for size, s in _SIZES for entry in hub_entries(f"DeiT{s}16", "deit", 224, 1000,
                                                            f"deit_{size}_distilled_patch16_224.fb_in1k")),
]

ALIASES = {"imagenet": tuple(f"deit_{size}_distilled_patch16_224.fb_in1k" for size, _ in _SIZES)}

HUB_IDS = {
    **{f"facebook/deit-{size}-patch16-224": f"ViT{s}16/deit_{size}_patch16_224.fb_in1k" for size, s in _SIZES},
    **{f"facebook/deit-{size}-distilled-patch16-224": f"DeiT{s}16/deit_{size}_distilled_patch16_224.fb_in1k"
       for size, s in _SIZES},
}
