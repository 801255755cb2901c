"""DINOv3 (Simeoni et al., 2025): 2-D rotary position embeddings, 4 registers, LayerScale, no key
bias; S+/16 and H+/16 with a SwiGLU MLP (Meta's ffn_ratio 6, two thirds of it); 7B/16 with a
SwiGLU MLP and no q / k / v biases (its second class-token norm, `local_cls_norm`, serves the
pre-training's local crops only). timm's ungated copies of Meta's weights (`formats.dinov3`),
under Meta's DINOv3 License, not Apache-2.0; the `_qkvb` files keep the q / v biases the builders
have (zeros in the distilled models), the 7B has none."""

from keras_vit.families.records import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, hub_entries

_DINOV3 = dict(patch_size=16, position_embedding="rope", num_registers=4, layer_scale_init=1e-5, key_bias=False,
               approximate_gelu=False, layer_norm_epsilon=1e-5, input_size=224, include_top=False,
               preprocessing="dinov3")

MODELS = {
    "DINOv3S16": dict(_DINOV3, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DINOv3SPlus16": dict(_DINOV3, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536, mlp="swiglu"),
    "DINOv3B16": dict(_DINOV3, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "DINOv3L16": dict(_DINOV3, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "DINOv3HPlus16": dict(_DINOV3, hidden_dim=1280, depth=32, num_heads=20, mlp_dim=5120, mlp="swiglu"),
    "DINOv37B16": dict(_DINOV3, hidden_dim=4096, depth=40, num_heads=32, mlp_dim=8192, mlp="swiglu", qkv_bias=False),
}

PREPROCESSING = {
    # transformers DINOv3ViTImageProcessorFast: ImageNet mean / std, bilinear resize to 224, no crop.
    "dinov3": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0),
}

_LICENSE = "dinov3-license"

ENTRIES = [
    *(entry for variant, size, data in (("DINOv3S16", "small", "lvd1689m"), ("DINOv3SPlus16", "small_plus", "lvd1689m"),
                                         ("DINOv3B16", "base", "lvd1689m"), ("DINOv3L16", "large", "lvd1689m"),
                                         ("DINOv3L16", "large", "sat493m"), ("DINOv3HPlus16", "huge_plus", "lvd1689m"))
      for entry in hub_entries(variant, "dinov3", 224, None, f"vit_{size}_patch16_dinov3_qkvb.{data}", license=_LICENSE)),
    *hub_entries("DINOv37B16", "dinov3", 224, None, "vit_7b_patch16_dinov3.lvd1689m", "vit_7b_patch16_dinov3.sat493m",
                 license=_LICENSE),
]
