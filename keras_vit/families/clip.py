"""CLIP image towers (Radford et al., 2021; transformers `CLIPVisionModelWithProjection`, OpenCLIP,
timm `vit_*_clip_*`): a LayerNorm before the blocks, no patch-embedding bias, epsilon 1e-5, the
pooled class token projected (bias-free). OpenAI's B/32, B/16, L/14 (224 and 336 px weights),
OpenCLIP's H/14 and bigG/14 (timm's `vit_gigantic`). The activation is the weights' (OpenAI's and
some others' quick GELU: their entries say so), else GELU. Each entry under its own licence."""

from keras_vit.families.records import CLIP_MEAN, CLIP_STD, Preprocessing, hub_entries, timm_resolution

_CLIP = dict(pre_norm=True, patch_bias=False, approximate_gelu=False, layer_norm_epsilon=1e-5, include_top=False,
             pooling="token", input_size=224, preprocessing="clip")

MODELS = {
    "CLIPB32": dict(_CLIP, patch_size=32, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, projection_dim=512),
    "CLIPB16": dict(_CLIP, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, projection_dim=512),
    "CLIPL14": dict(_CLIP, patch_size=14, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096, projection_dim=768),
    "CLIPH14": dict(_CLIP, patch_size=14, hidden_dim=1280, depth=32, num_heads=16, mlp_dim=5120, projection_dim=1024),
    "CLIPBigG14": dict(_CLIP, patch_size=14, hidden_dim=1664, depth=48, num_heads=16, mlp_dim=8192, projection_dim=1280),
}

PREPROCESSING = {
    # OpenAI's preprocessing, transformers CLIPImageProcessor, OpenCLIP: OpenAI CLIP mean / std, bicubic resize of
    # the short side to the input size, centre crop.
    "clip": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
}

# timm's copies (the image projection as the head), by model, timm's name, licence and whether they were trained
# with quick GELU (timm's "natively QuickGELU" notes). OpenAI's (MIT), LAION-2B's (OpenCLIP, MIT), DataComp-XL's
# (MIT), Apple's DFN (apple-ascl) and Meta's MetaCLIP 2 worldwide (CC-BY-NC-4.0).
_FILES = (
    ("CLIPB32", "vit_base_patch32_clip_224.openai", "mit", True),
    ("CLIPB16", "vit_base_patch16_clip_224.openai", "mit", True),
    ("CLIPL14", "vit_large_patch14_clip_224.openai", "mit", True),
    ("CLIPL14", "vit_large_patch14_clip_336.openai", "mit", True),
    ("CLIPB32", "vit_base_patch32_clip_224.laion2b", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.laion2b", "mit", False),
    ("CLIPL14", "vit_large_patch14_clip_224.laion2b", "mit", False),
    ("CLIPH14", "vit_huge_patch14_clip_224.laion2b", "mit", False),
    ("CLIPBigG14", "vit_gigantic_patch14_clip_224.laion2b", "mit", False),
    ("CLIPB32", "vit_base_patch32_clip_224.datacompxl", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.datacompxl", "mit", False),
    ("CLIPL14", "vit_large_patch14_clip_224.datacompxl", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.dfn2b", "apple-ascl", False),
    ("CLIPL14", "vit_large_patch14_clip_224.dfn2b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_224.dfn5b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_378.dfn5b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_224.metaclip2_worldwide", "cc-by-nc-4.0", True),
)

ENTRIES = [
    # OpenCLIP's L/14 LAION-2B was trained on inputs scaled by mean / std 0.5 (timm's `IMAGENET_INCEPTION_*`):
    # the numbers of SigLIP's entry.
    entry for variant, name, license, quick_gelu in _FILES
    for entry in hub_entries(variant, "siglip" if name == "vit_large_patch14_clip_224.laion2b" else "clip",
                             timm_resolution(name), None, name, license=license, quick_gelu=quick_gelu)
]
