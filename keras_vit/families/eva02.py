"""EVA-02 (Fang et al., 2023), timm's `eva02_*_patch14_*` files (`eva.py`, MIT): a learned table
besides the 'ij' axial rotation (period 10000, the indices scaled to the 16 x 16 grid of 224 px),
q / v biases, SwiGLU (4 * 2/3 of the width), the mean of the patch tokens under `fc_norm`, no
LayerScale; B / L with the MLP's inner norm. The named models are at the size of the ImageNet-1k
fine-tuned files; the MIM pre-trained ones (224 px, no head) are entries of the same models.

EVA-CLIP's image towers (Sun et al., 2023; timm `eva02_{base_patch16,large_patch14}_clip_*`, OpenCLIP's
`EVA02-B-16` / `EVA02-L-14[-336]`): B / L's blocks with the attention's inner norm (`attention_norm`),
the final norm on the tokens, the class token pooled and projected with a bias (timm's `head`), OpenCLIP's
preprocessing ("clip"); the L/14 336 px weights are an entry of EVA02CLIPL14. EVA02-E-14 (post-norm
blocks) is not read."""

from keras_vit.families.records import CLIP_MEAN, CLIP_STD, Preprocessing, hub_entries

_EVA02 = dict(patch_size=14, position_embedding="rope", rope_form="axial", rope_theta=10000.0, rope_indexing="ij",
              rope_reference_grid=(16, 16), rope_absolute=True, key_bias=False, mlp="swiglu", fc_norm=True, pooling="avg",
              approximate_gelu=False, layer_norm_epsilon=1e-6, preprocessing="eva02")

MODELS = {
    "EVA02Ti14": dict(_EVA02, hidden_dim=192, depth=12, num_heads=3, mlp_dim=512, input_size=336),
    "EVA02S14": dict(_EVA02, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1024, input_size=336),
    "EVA02B14": dict(_EVA02, hidden_dim=768, depth=12, num_heads=12, mlp_dim=2048, mlp_norm=True, input_size=448),
    "EVA02L14": dict(_EVA02, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=2730, mlp_norm=True, input_size=448),
}
_EVA_CLIP = dict(_EVA02, mlp_norm=True, attention_norm=True, fc_norm=False, pooling="token", include_top=False,
                 projection_bias=True, input_size=224, preprocessing="clip")
MODELS.update({
    "EVA02CLIPB16": dict(_EVA_CLIP, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=2048,
                         projection_dim=512),
    "EVA02CLIPL14": dict(_EVA_CLIP, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=2730, projection_dim=768),
})

PREPROCESSING = {
    # timm eva.py `_cfg`s: OpenAI CLIP mean / std, bicubic; the fine-tuned models uncropped.
    "eva02": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0),
}

ENTRIES = [
    *hub_entries("EVA02Ti14", "eva02", 336, 1000, "eva02_tiny_patch14_336.mim_in22k_ft_in1k", license="mit"),
    *hub_entries("EVA02S14", "eva02", 336, 1000, "eva02_small_patch14_336.mim_in22k_ft_in1k", license="mit"),
    *hub_entries("EVA02B14", "eva02", 448, 1000, "eva02_base_patch14_448.mim_in22k_ft_in22k_in1k", license="mit"),
    *hub_entries("EVA02L14", "eva02", 448, 1000, "eva02_large_patch14_448.mim_in22k_ft_in22k_in1k",
                 "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k", license="mit"),
    *(entry for variant, size in (("EVA02Ti14", "tiny"), ("EVA02S14", "small"), ("EVA02B14", "base"), ("EVA02L14", "large"))
      for entry in hub_entries(variant, "eva02", 224, None, f"eva02_{size}_patch14_224.mim_in22k", license="mit")),
    *hub_entries("EVA02L14", "eva02", 224, None, "eva02_large_patch14_224.mim_m38m", license="mit"),
    # EVA-CLIP (BAAI, MIT), trained on Merged-2B: timm's image towers.
    *hub_entries("EVA02CLIPB16", "clip", 224, None, "eva02_base_patch16_clip_224.merged2b", license="mit"),
    *hub_entries("EVA02CLIPL14", "clip", 224, None, "eva02_large_patch14_clip_224.merged2b", license="mit"),
    *hub_entries("EVA02CLIPL14", "clip", 336, None, "eva02_large_patch14_clip_336.merged2b", license="mit"),
]
