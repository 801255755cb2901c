"""Meta's Perception Encoder core image towers (PE-core; Bolya et al., 2025; timm `eva.py`'s
`vit_pe_core_*`, OpenCLIP's `PE-Core-*`; Apache-2.0): a LayerNorm before the blocks, no patch-embedding
bias, a learned table beside the axial rotation ('xy', period 10000) of the patch indices starting at 1 and
scaled to the native grid (`rope_offset`, `rope_reference_grid`), exact GELU, epsilon 1e-5, the final norm
on the tokens, an attention pool of 8 heads (`map_heads`) and a bias-free image projection; images scaled by
mean / std 0.5. PE-core G/14 (no class token, its pool's MLP narrower than the blocks') is not read."""

from keras_vit.families.records import hub_entries, timm_resolution

_PE = dict(position_embedding="rope", rope_form="axial", rope_theta=10000.0, rope_absolute=True, rope_offset=1.0,
           pre_norm=True, patch_bias=False, approximate_gelu=False, layer_norm_epsilon=1e-5, include_top=False,
           pooling="map", map_heads=8, preprocessing="siglip")

MODELS = {
    "PECoreT16": dict(_PE, patch_size=16, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768, projection_dim=512,
                      rope_reference_grid=(24, 24), input_size=384),
    "PECoreS16": dict(_PE, patch_size=16, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536, projection_dim=512,
                      rope_reference_grid=(24, 24), input_size=384),
    "PECoreB16": dict(_PE, patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, projection_dim=1024,
                      rope_reference_grid=(14, 14), input_size=224),
    "PECoreL14": dict(_PE, patch_size=14, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096, projection_dim=1024,
                      rope_reference_grid=(24, 24), input_size=336),
}

# timm's copies of facebook/PE-Core-{T16-384,S16-384,B16-224,L14-336} (timm's conversion of Meta's files).
ENTRIES = [
    entry for variant, name in (("PECoreT16", "vit_pe_core_tiny_patch16_384.fb"),
                                ("PECoreS16", "vit_pe_core_small_patch16_384.fb"),
                                ("PECoreB16", "vit_pe_core_base_patch16_224.fb"),
                                ("PECoreL14", "vit_pe_core_large_patch14_336.fb"))
    for entry in hub_entries(variant, "siglip", timm_resolution(name), None, name,
                             license="apache-2.0")
]
