"""AIMv2 image towers (Fini et al., 2024; apple/ml-aim `aimv2_*`): no class token, RMSNorm (also
of the patch embeddings), bias-free projections, a SiLU-gated MLP; the native-resolution L/14 with
MAE's sin-cos table. Apple's `apple/aimv2-*` `Aimv2VisionModel` folders (`formats.hf_aimv2`), under
Apple's AMLR licence (research use), not Apache-2.0."""

from keras_vit.families.records import CLIP_MEAN, CLIP_STD, HUB, Preprocessing, hub_entries

_AIMV2 = dict(patch_size=14, class_token=False, norm="rmsnorm", patch_norm=True, mlp="swiglu", qkv_bias=False,
              proj_bias=False, mlp_bias=False, layer_norm_epsilon=1e-5, input_size=224, include_top=False,
              preprocessing="aimv2")

MODELS = {
    "AIMv2L14": dict(_AIMV2, hidden_dim=1024, depth=24, num_heads=8, mlp_dim=2816),
    "AIMv2H14": dict(_AIMV2, hidden_dim=1536, depth=24, num_heads=12, mlp_dim=4096),
    "AIMv21B14": dict(_AIMV2, hidden_dim=2048, depth=24, num_heads=16, mlp_dim=5632),
    "AIMv23B14": dict(_AIMV2, hidden_dim=3072, depth=24, num_heads=24, mlp_dim=8192),
    "AIMv2L14Native": dict(_AIMV2, hidden_dim=1024, depth=24, num_heads=8, mlp_dim=2816, position_embedding="sincos2d",
                           sincos_form="mae"),
}

PREPROCESSING = {
    # apple/aimv2-*'s CLIPImageProcessor: OpenAI CLIP mean / std, bicubic resize of the short side, centre crop.
    "aimv2": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
}

_LICENSE = "apple-amlr"

ENTRIES = [
    *(entry for variant, size in (("AIMv2L14", "large"), ("AIMv2H14", "huge"), ("AIMv21B14", "1B"), ("AIMv23B14", "3B"))
      for res in (224, 336, 448)
      for entry in hub_entries(variant, "aimv2", res, None, f"apple/aimv2-{size}-patch14-{res}", url=HUB,
                               license=_LICENSE)),
    *hub_entries("AIMv2L14Native", "aimv2", 224, None, "apple/aimv2-large-patch14-native", url=HUB, license=_LICENSE),
]
