"""The named models of the plain-ViT families beyond the paper (SPEC section 7), as data.

Plain Python, no Keras (the command line lists model names before importing it). Each entry:
the `VisionTransformer` arguments of the architecture (its family's options included), and
the defaults of the family's checkpoints: input size, GELU flavour, head, preprocessing.
"""

_DEIT = dict(patch_size=16, distillation_token=True, approximate_gelu=False, input_size=224,
             preprocessing="deit")
_DINOV2 = dict(patch_size=14, layer_scale_init=1e-5, approximate_gelu=False, input_size=518, include_top=False,
               preprocessing="dinov2")
_DINOV3 = dict(patch_size=16, position_embedding="rope", num_registers=4, layer_scale_init=1e-5, key_bias=False,
               approximate_gelu=False, layer_norm_epsilon=1e-5, input_size=224, include_top=False,
               preprocessing="dinov3")
_ROPE_VIT = dict(patch_size=16, position_embedding="rope", rope_form="axial", rope_theta=100.0, layer_scale_init=1e-5,
                 approximate_gelu=False, layer_norm_epsilon=1e-6, input_size=224, preprocessing="deit")
_ROPE_MIXED = dict(_ROPE_VIT, rope_form="mixed", rope_theta=10.0)
# EVA-02 (timm `eva02_*_patch14_*`): a learned table besides the 'ij' axial rotation (period 10000, the indices
# scaled to the 16 x 16 grid of 224 px), q / v biases, SwiGLU (4 * 2/3 of the width), the mean of the patch tokens
# under `fc_norm`, no LayerScale.
_EVA02 = dict(patch_size=14, position_embedding="rope", rope_form="axial", rope_theta=10000.0, rope_indexing="ij",
              rope_reference_grid=(16, 16), rope_absolute=True, key_bias=False, mlp="swiglu", fc_norm=True, pooling="avg",
              approximate_gelu=False, layer_norm_epsilon=1e-6, preprocessing="eva02")
_SIGLIP = dict(class_token=False, pooling="map", approximate_gelu=True, input_size=224, include_top=False,
               preprocessing="siglip")
_AIMV2 = dict(patch_size=14, class_token=False, norm="rmsnorm", patch_norm=True, mlp="swiglu", qkv_bias=False,
              proj_bias=False, mlp_bias=False, layer_norm_epsilon=1e-5, input_size=224, include_top=False,
              preprocessing="aimv2")
# CLIP image towers (Radford et al., 2021; transformers `CLIPVisionModelWithProjection`, OpenCLIP, timm `vit_*_clip_*`):
# a LayerNorm before the blocks, no patch-embedding bias, epsilon 1e-5, the pooled class token projected (bias-free).
# The activation is the weights' (OpenAI's and some others' quick GELU: their entries say so), else GELU.
_CLIP = dict(pre_norm=True, patch_bias=False, approximate_gelu=False, layer_norm_epsilon=1e-5, include_top=False,
             pooling="token", input_size=224, preprocessing="clip")

FAMILIES = {
    # DeiT distilled (Touvron et al., 2021): a distillation token and a second head.
    "DeiTTi16": dict(_DEIT, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768),
    "DeiTS16": dict(_DEIT, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DeiTB16": dict(_DEIT, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    # DINOv2 (Oquab et al., 2023): LayerScale, patch 14 at 518 px; g/14 with a SwiGLU MLP.
    "DINOv2S14": dict(_DINOV2, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DINOv2B14": dict(_DINOV2, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "DINOv2L14": dict(_DINOV2, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "DINOv2G14": dict(_DINOV2, hidden_dim=1536, depth=40, num_heads=24, mlp_dim=4096, mlp="swiglu"),
    # DINOv3 (Simeoni et al., 2025): 2-D rotary position embeddings, 4 registers, LayerScale, no key bias;
    # S+/16 and H+/16 with a SwiGLU MLP (Meta's ffn_ratio 6, two thirds of it); 7B/16 with a SwiGLU MLP and no
    # q / k / v biases (its second class-token norm, `local_cls_norm`, serves the pre-training's local crops only).
    "DINOv3S16": dict(_DINOV3, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DINOv3SPlus16": dict(_DINOV3, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536, mlp="swiglu"),
    "DINOv3B16": dict(_DINOV3, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "DINOv3L16": dict(_DINOV3, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "DINOv3HPlus16": dict(_DINOV3, hidden_dim=1280, depth=32, num_heads=20, mlp_dim=5120, mlp="swiglu"),
    "DINOv37B16": dict(_DINOV3, hidden_dim=4096, depth=40, num_heads=32, mlp_dim=8192, mlp="swiglu", qkv_bias=False),
    # Naver's RoPE-ViT (Heo et al., 2024), timm's `vit_*_patch16_rope[_mixed]_224`: DeiT III blocks (LayerScale),
    # the class token, no position table; the axial rotary form (period 100) or RoPE-Mixed (learned frequencies).
    # The `_ape` variants (`vit_*_patch16_rope[_mixed]_ape_224`): a learned table of the patches besides the rotations.
    **{f"RoPE{kind}{ape}ViT{size}16": dict(base, hidden_dim=d, depth=n, num_heads=h, mlp_dim=4 * d,
                                           **({"rope_absolute": True} if ape else {}))
       for kind, base in (("", _ROPE_VIT), ("Mixed", _ROPE_MIXED)) for ape in ("", "APE")
       for size, d, n, h in (("S", 384, 12, 6), ("B", 768, 12, 12), ("L", 1024, 24, 16))},
    # EVA-02 (Fang et al., 2023) at the size of its ImageNet-1k fine-tuned files; B / L with the MLP's inner norm.
    "EVA02Ti14": dict(_EVA02, hidden_dim=192, depth=12, num_heads=3, mlp_dim=512, input_size=336),
    "EVA02S14": dict(_EVA02, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1024, input_size=336),
    "EVA02B14": dict(_EVA02, hidden_dim=768, depth=12, num_heads=12, mlp_dim=2048, mlp_norm=True, input_size=448),
    "EVA02L14": dict(_EVA02, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=2730, mlp_norm=True, input_size=448),
    # SigLIP image towers (Zhai et al., 2023): no class token, MAP head, tanh GELU.
    "SigLIPB16": dict(_SIGLIP, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "SigLIPSo400m14": dict(_SIGLIP, patch_size=14, hidden_dim=1152, depth=27, num_heads=16, mlp_dim=4304),
    # The shapes SigLIP 2 (Tschannen et al., 2025) adds, same block and head: L/16, So400m/16, g/16 (giant-opt).
    "SigLIPL16": dict(_SIGLIP, patch_size=16, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096, input_size=256),
    "SigLIPSo400m16": dict(_SIGLIP, patch_size=16, hidden_dim=1152, depth=27, num_heads=16, mlp_dim=4304,
                           input_size=256),
    "SigLIPG16": dict(_SIGLIP, patch_size=16, hidden_dim=1536, depth=40, num_heads=16, mlp_dim=6144, input_size=256),
    # AIMv2 image towers (Fini et al., 2024; apple/ml-aim `aimv2_*`): no class token, RMSNorm (also of the patch
    # embeddings), bias-free projections, a SiLU-gated MLP; the native-resolution L/14 with MAE's sin-cos table.
    "AIMv2L14": dict(_AIMV2, hidden_dim=1024, depth=24, num_heads=8, mlp_dim=2816),
    "AIMv2H14": dict(_AIMV2, hidden_dim=1536, depth=24, num_heads=12, mlp_dim=4096),
    "AIMv21B14": dict(_AIMV2, hidden_dim=2048, depth=24, num_heads=16, mlp_dim=5632),
    "AIMv23B14": dict(_AIMV2, hidden_dim=3072, depth=24, num_heads=24, mlp_dim=8192),
    "AIMv2L14Native": dict(_AIMV2, hidden_dim=1024, depth=24, num_heads=8, mlp_dim=2816, position_embedding="sincos2d",
                           sincos_form="mae"),
    # CLIP: OpenAI's B/32, B/16, L/14 (224 and 336 px weights), OpenCLIP's H/14 and bigG/14 (timm's `vit_gigantic`).
    "CLIPB32": dict(_CLIP, patch_size=32, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, projection_dim=512),
    "CLIPB16": dict(_CLIP, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, projection_dim=512),
    "CLIPL14": dict(_CLIP, patch_size=14, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096, projection_dim=768),
    "CLIPH14": dict(_CLIP, patch_size=14, hidden_dim=1280, depth=32, num_heads=16, mlp_dim=5120, projection_dim=1024),
    "CLIPBigG14": dict(_CLIP, patch_size=14, hidden_dim=1664, depth=48, num_heads=16, mlp_dim=8192, projection_dim=1280),
}
