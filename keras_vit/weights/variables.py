"""The key table between the canonical layout and keras_vit's own variable paths
(`embedding/kernel`, `encoder/encoderblock_0/attention/qkv/kernel`, `stem/conv_root/kernel`,
...): what the loader assigns to a model and `export` reads from one, and the table of the
"keras" format (`formats.keras`, `.weights.h5` / `.keras` files)."""

from keras_vit.weights import stems
from keras_vit.weights.canonical import (
    ATTN, ATTN_NORM, BLOCK, DIST, EMBEDDING_NORM, EOMT_CLASS, EOMT_MASK_MLP, EOMT_QUERIES, EOMT_UPSCALE, FC_NORM, HEAD_DIST,
    LAYER_SCALE, MAP, MAP_ATTN, MLP, MLP_NORM, POSEMB, PRE_NORM, PROJECTION, PROJECTION_BIAS, QK_NORM, QKV, REG,
    ROPE_FREQS,
)
from keras_vit.weights.lazy import concat
from keras_vit.weights.table import Row, Table, pairs
from keras_vit.weights.transforms import bias_to_heads, flat, heads_of, heads_to_bias, join_rows, linear_to_heads, split_rows

STEM = "stem/"
BLOCK_PATH = "encoder/encoderblock_{i}/"
NORM_VARIABLES = ("gamma", "beta")


def _norm(canonical, path, optional=False):
    """A LayerNorm / RMSNorm: its `bias` (`beta`) absent in RMSNorm."""
    return pairs((canonical + "scale", path + "gamma"), optional=optional) + pairs(
        (canonical + "bias", path + "beta"), optional=True)


def _qkv_kernel_to_canonical(arrays, heads):
    return linear_to_heads(split_rows([arrays[0].transpose(1, 0)], heads), heads)


def _qkv_kernel_from_canonical(arrays, heads):
    return [concat([a.reshape(a.shape[0], -1) for a in arrays], axis=1)]


def _qkv_bias_to_canonical(arrays, heads):
    return bias_to_heads(split_rows(arrays, heads), heads)


def _qkv_bias_from_canonical(arrays, heads):
    return join_rows(heads_to_bias(arrays, heads), heads)


def _out_kernel_to_canonical(arrays, heads):
    a = arrays[0]
    return [a.reshape(heads_of(a, heads, "attention"), -1, a.shape[1])]


def _out_kernel_from_canonical(arrays, heads):
    return [arrays[0].reshape(-1, arrays[0].shape[-1])]


def _dense_to_heads(arrays, heads):
    """A `(D, D)` kernel -> `(D, heads, D // heads)`, a `(D,)` bias -> `(heads, D // heads)`."""
    kernel, bias = arrays
    return [kernel.reshape(kernel.shape[0], heads_of(kernel, heads, "attention"), -1), bias.reshape(heads, -1)]


def _heads_to_dense(arrays, heads):
    kernel, bias = arrays
    return [kernel.reshape(kernel.shape[0], -1), bias.reshape(-1)]


def _stem_norm(canonical):
    return Row((canonical + "scale", canonical + "bias"), (STEM + canonical + "gamma", STEM + canonical + "beta"),
               None, flat, optional="{" not in canonical)


def _stem_conv(canonical):
    return Row(canonical + "kernel", STEM + canonical + "kernel", optional="{" not in canonical)


BIT_STEM = (
    _stem_conv("conv_root/"),
    _stem_norm("gn_root/"),
    _stem_conv("block{s}/unit{u}/conv{c}/"),
    _stem_norm("block{s}/unit{u}/gn{c}/"),
    _stem_conv("block{s}/unit{u}/conv_proj/"),
    _stem_norm("block{s}/unit{u}/gn_proj/"),
)

MAP_HEAD = (
    *pairs((MAP + "probe", "map_head/probe"), optional=True),
    *(
        Row((MAP_ATTN + f"{n}/kernel", MAP_ATTN + f"{n}/bias"), (f"map_head/{n}/kernel", f"map_head/{n}/bias"),
            _dense_to_heads, _heads_to_dense, optional=True)
        for n in QKV
    ),
    Row(MAP_ATTN + "out/kernel", "map_head/out/kernel", _out_kernel_to_canonical, _out_kernel_from_canonical, True),
    *pairs((MAP_ATTN + "out/bias", "map_head/out/bias"), optional=True),
    *pairs((MAP + "LayerNorm_0/scale", "map_head/ln/gamma"), (MAP + "LayerNorm_0/bias", "map_head/ln/beta"), optional=True),
    *pairs(*((MAP + f"MlpBlock_0/Dense_{j}/{p}", f"map_head/mlp/dense_{j}/{p}") for j in (0, 1) for p in ("kernel", "bias")),
           optional=True),
)

# The EoMT head of `keras_vit.dense.eomt` (its layers `eomt_queries` and `eomt_head`).
EOMT_HEAD = pairs(
    (EOMT_QUERIES, "eomt_queries/tokens"),
    *((EOMT_CLASS + p, "eomt_head/class_head/" + p) for p in ("kernel", "bias")),
    *((EOMT_MASK_MLP + p, "eomt_head/mask_head_{j}/" + p) for p in ("kernel", "bias")),
    *((EOMT_UPSCALE + f"conv_transpose/{p}", f"eomt_head/upscale_{{j}}_conv_transpose/{p}") for p in ("kernel", "bias")),
    (EOMT_UPSCALE + "depthwise/kernel", "eomt_head/upscale_{j}_depthwise/kernel"),
    optional=True,
) + _norm(EOMT_UPSCALE + "LayerNorm_0/", "eomt_head/upscale_{j}_norm/", optional=True)

TABLE = Table(
    pairs(("embedding/kernel", "embedding/kernel"))
    + pairs(
        ("embedding/bias", "embedding/bias"),
        (PROJECTION, "projection/kernel"),
        (PROJECTION_BIAS, "projection/bias"),
        ("cls", "class_token/cls"),
        (DIST, "dist_token/tokens"),
        (REG, "registers/tokens"),
        (POSEMB, "posembed_input/pos_embedding"),
        (LAYER_SCALE[0], BLOCK_PATH + "ls_1/gamma"),
        (LAYER_SCALE[1], BLOCK_PATH + "ls_2/gamma"),
        (ROPE_FREQS, BLOCK_PATH + "attention/rope_frequencies"),
        *zip(HEAD_DIST, ("head_dist/kernel", "head_dist/bias")),
        optional=True,
    )
    + _norm(EMBEDDING_NORM, "embedding_norm/", optional=True)
    + _norm(PRE_NORM, "pre_norm/", optional=True)
    + _norm(BLOCK + "LayerNorm_0/", BLOCK_PATH + "ln_1/")
    + (
        Row(tuple(ATTN + f"{n}/kernel" for n in QKV), BLOCK_PATH + "attention/qkv/kernel",
            _qkv_kernel_to_canonical, _qkv_kernel_from_canonical),
        Row(tuple(ATTN + f"{n}/bias" for n in QKV), BLOCK_PATH + "attention/qkv/bias",
            _qkv_bias_to_canonical, _qkv_bias_from_canonical, optional=True),
        Row(ATTN + "out/kernel", BLOCK_PATH + "attention/out/kernel", _out_kernel_to_canonical, _out_kernel_from_canonical),
    )
    + pairs((ATTN + "out/bias", BLOCK_PATH + "attention/out/bias"), optional=True)
    + _norm(QK_NORM[0], BLOCK_PATH + "attention/q_norm/", optional=True)
    + _norm(QK_NORM[1], BLOCK_PATH + "attention/k_norm/", optional=True)
    + _norm(ATTN_NORM, BLOCK_PATH + "attention/out_norm/", optional=True)
    + _norm(BLOCK + "LayerNorm_2/", BLOCK_PATH + "ln_2/")
    + _norm(MLP_NORM, BLOCK_PATH + "mlp/norm/", optional=True)
    + pairs(*((MLP + f"Dense_{j}/kernel", BLOCK_PATH + f"mlp/dense_{j}/kernel") for j in (0, 1)))
    + pairs(*((MLP + f"Dense_{j}/bias", BLOCK_PATH + f"mlp/dense_{j}/bias") for j in (0, 1)), optional=True)
    + _norm("Transformer/encoder_norm/", "encoder/encoder_norm/", optional=True)
    + _norm("fc_norm/", "fc_norm/", optional=True)
    + pairs(("pre_logits/kernel", "pre_logits/kernel"), ("pre_logits/bias", "pre_logits/bias"), optional=True)
    + pairs(("head/kernel", "head/kernel"), ("head/bias", "head/bias"), optional=True)
    + BIT_STEM
    + MAP_HEAD
    + EOMT_HEAD
)
EOMT_TABLE = Table(EOMT_HEAD, dense={})


def _full_table():
    return TABLE + stems.rows("keras")


def to_canonical(tensors, heads, what):
    """Canonical tensors of a model's variables (variable path -> LazyArray)."""
    return _full_table().to_canonical(tensors, heads, what)


def from_canonical(tensors, heads, what, table=None):
    """Variable path -> LazyArray of canonical `tensors` (through `table`, default the whole ViT's)."""
    return (table or _full_table()).from_canonical(tensors, heads, what)
