"""OpenCLIP's image tower (`open_clip.transformer.VisionTransformer`): the `visual.*` keys of
`open_clip_model.safetensors` / `open_clip_pytorch_model.bin` (a torch pickle, read with
`weights_only=True`), a file or a folder holding one; the text tower's keys are left out. Read only.

Keys: `conv1` (no bias), `class_embedding` `(width,)`, `positional_embedding` `(tokens, width)`,
`ln_pre`, `transformer.resblocks.{i}.` `ln_1`, `attn.in_proj_weight` / `in_proj_bias` (q, k, v
rows), `attn.out_proj`, `ln_2`, `mlp.c_fc`, `mlp.c_proj` (and `ls_1` / `ls_2` LayerScale), `ln_post`
and `proj` `(width, embed_dim)`, used as `x @ proj` (keras_vit's `projection_dim`). The files
carry no configuration: the architecture comes from the shapes, the head count and activation
from an `open_clip_config.json` beside them (`model_cfg.vision_cfg.head_width`, default 64, and
`model_cfg.quick_gelu`), else the named models' head count and GELU (pass `num_heads=` /
`quick_gelu=True` otherwise). OpenCLIP's LayerNorm epsilon is 1e-5; it resizes position
embeddings bicubic with antialiasing, pools the class token (`pool_type='tok'`; the other
poolings are refused)."""

from keras_vit.preprocessing import HALF
from keras_vit.weights.canonical import ATTN, LAYER_SCALE, PRE_NORM, PROJECTION, QKV, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import config_pair, norm_rows, torch_rows
from keras_vit.weights.formats.timm import fused_qkv_from_canonical, fused_qkv_to_canonical
from keras_vit.weights.table import Row, Table, pairs

PREFIX = "visual."
BLOCK = "transformer.resblocks.{i}."
EPSILON, HEAD_WIDTH = 1e-5, 64  # OpenCLIP's LayerNorm and `CLIPVisionCfg.head_width` defaults

TABLE = Table(
    torch_rows("conv1.", "class_embedding", "positional_embedding", BLOCK + "ln_1.", BLOCK + "ln_2.",
               BLOCK + "attn.out_proj.", BLOCK + "mlp.c_fc.", BLOCK + "mlp.c_proj.", "ln_post.", None, None)
    + (Row(tuple(ATTN + f"{n}/kernel" for n in QKV) + tuple(ATTN + f"{n}/bias" for n in QKV),
           (BLOCK + "attn.in_proj_weight", BLOCK + "attn.in_proj_bias"), fused_qkv_to_canonical, fused_qkv_from_canonical),)
    + norm_rows(PRE_NORM, "ln_pre.")
    + pairs((PROJECTION, "proj"), (LAYER_SCALE[0], BLOCK + "ls_1.gamma"), (LAYER_SCALE[1], BLOCK + "ls_2.gamma"),
            optional=True)
)


def detect(raw):
    return PREFIX + "conv1.weight" in raw.tensors


def prepare(raw):
    """The `visual.` keys without that prefix; the class token and position embedding with their
    batch axes."""
    tensors = {k[len(PREFIX):]: v for k, v in raw.tensors.items() if k.startswith(PREFIX)}
    for key in ("class_embedding", "positional_embedding"):
        if key in tensors and len(tensors[key].shape) in (1, 2):
            tensors[key] = tensors[key].reshape(1, *((1,) if key == "class_embedding" else ()), *tensors[key].shape)
    return tensors


def _vision_config(raw):
    """`model_cfg.vision_cfg` and `model_cfg` of `open_clip_config.json` ({} without one)."""
    config = raw.meta.get("open_clip_config") or {}
    model = config.get("model_cfg", {})
    vision = model.get("vision_cfg", {}) if isinstance(model, dict) else None
    if not isinstance(model, dict) or not isinstance(vision, dict):
        raise ValueError(f"{raw.path}: its open_clip_config.json's model_cfg / vision_cfg is not a JSON object.")
    return vision, model


def metadata(raw, tensors):
    vision, model = _vision_config(raw)
    if vision.get("pool_type", "tok") != "tok" or vision.get("attentional_pool"):
        raise ValueError(f"{raw.path}: an OpenCLIP image tower with pool_type={vision.get('pool_type')!r} / attentional "
                         "pooling; keras_vit reads those pooling the class token (pool_type='tok').")
    width, heads, grid = tensors["ln_post.weight"].shape[0] if "ln_post.weight" in tensors else None, None, None
    if vision:
        head_width = vision.get("head_width", HEAD_WIDTH)
        heads = width // head_width if isinstance(head_width, int) and head_width > 0 and width else None
        if "image_size" in vision and "patch_size" in vision:
            size = config_pair(vision["image_size"], "image_size", raw.path)
            patch = config_pair(vision["patch_size"], "patch_size", raw.path)
            grid = tuple(s // p for s, p in zip(size, patch))
    mean = (raw.meta.get("open_clip_config") or {}).get("preprocess_cfg", {}).get("mean")
    return Metadata(
        approximate_gelu=False, quick_gelu=model.get("quick_gelu", False) if model else None, num_heads=heads, grid=grid,
        layer_norm_epsilon=EPSILON, pooling="token", depth=vision.get("layers"),
        preprocessing="siglip" if isinstance(mean, list) and tuple(mean) == HALF else "clip",  # "siglip": mean / std 0.5
    )


FORMAT = Format(name="open_clip", table=TABLE, detect=detect, prepare=prepare, metadata=metadata,
                interpolation="bicubic_antialias")  # open_clip's resize_pos_embed
