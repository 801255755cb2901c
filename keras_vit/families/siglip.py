"""SigLIP image towers (Zhai et al., 2023): no class token, MAP head, tanh GELU; and the shapes
SigLIP 2 (Tschannen et al., 2025) adds, same block and head: L/16, So400m/16, g/16 (giant-opt).
The weights are the `vision_model` of Google's transformers `SiglipModel` files (Apache-2.0);
SigLIP 2's NaFlex files (`Siglip2Model`) load by path."""

from keras_vit.families.records import HALF, HUB, Preprocessing, hub_entries

_SIGLIP = dict(class_token=False, pooling="map", approximate_gelu=True, input_size=224, include_top=False,
               preprocessing="siglip")

MODELS = {
    "SigLIPB16": dict(_SIGLIP, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "SigLIPSo400m14": dict(_SIGLIP, patch_size=14, hidden_dim=1152, depth=27, num_heads=16, mlp_dim=4304),
    "SigLIPL16": dict(_SIGLIP, patch_size=16, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096, input_size=256),
    "SigLIPSo400m16": dict(_SIGLIP, patch_size=16, hidden_dim=1152, depth=27, num_heads=16, mlp_dim=4304,
                           input_size=256),
    "SigLIPG16": dict(_SIGLIP, patch_size=16, hidden_dim=1536, depth=40, num_heads=16, mlp_dim=6144, input_size=256),
}

PREPROCESSING = {
    # transformers SiglipImageProcessor: mean / std 0.5, bicubic resize to the square.
    "siglip": Preprocessing(HALF, HALF, "bicubic", 1.0),
    # SigLIP 2 NaFlex (transformers Siglip2ImageProcessor: mean / std 0.5, bilinear resize to the patch budget).
    "siglip2": Preprocessing(HALF, HALF, "bilinear", 1.0),
}

ENTRIES = [
    *hub_entries("SigLIPB16", "siglip", 224, None, "google/siglip-base-patch16-224", url=HUB),
    *hub_entries("SigLIPSo400m14", "siglip", 224, None, "google/siglip-so400m-patch14-224", url=HUB),
    # "384 px": its 27 x 27 patches cover 378 px (transformers' stride-14 convolution drops 6).
    *hub_entries("SigLIPSo400m14", "siglip", 378, None, "google/siglip-so400m-patch14-384", url=HUB),
    # SigLIP 2's fixed-resolution towers.
    *(entry for res in (224, 256, 384, 512)
      for entry in hub_entries("SigLIPB16", "siglip2", res, None, f"google/siglip2-base-patch16-{res}", url=HUB)),
    *hub_entries("SigLIPSo400m14", "siglip2", 224, None, "google/siglip2-so400m-patch14-224", url=HUB),
    *hub_entries("SigLIPSo400m14", "siglip2", 378, None, "google/siglip2-so400m-patch14-384", url=HUB),
    *(entry for res in (256, 384, 512) for variant, repo in (("SigLIPL16", "large"), ("SigLIPSo400m16", "so400m"))
      for entry in hub_entries(variant, "siglip2", res, None, f"google/siglip2-{repo}-patch16-{res}", url=HUB)),
    *(entry for res in (256, 384)
      for entry in hub_entries("SigLIPG16", "siglip2", res, None, f"google/siglip2-giant-opt-patch16-{res}", url=HUB)),
]
