"""The rule tables: original npz (canonical) <-> timm, Hugging Face transformers, keras_vit.

Canonical keys are those of the original google-research/vision_transformer `.npz` files
(SPEC.md section 2); `{i}` is the block index.
"""

from keras_vit.weights.lazy import concat
from keras_vit.weights.rules import (
    Rule,
    heads_of,
    bias_to_heads,
    conv_to_ours,
    conv_to_theirs,
    heads_to_bias,
    heads_to_linear,
    heads_to_out,
    join_rows,
    linear_to_heads,
    out_to_heads,
    split_rows,
)

POSEMB = "Transformer/posembed_input/pos_embedding"
BLOCK = "Transformer/encoderblock_{i}/"
ATTN = BLOCK + "MultiHeadDotProductAttention_1/"
MLP = BLOCK + "MlpBlock_3/"
QKV = ("query", "key", "value")


def _pairs(ours_theirs, to_ours=None, to_theirs=None, optional=False):
    return [Rule((o,), (t,), to_ours, to_theirs, optional) for o, t in ours_theirs]


def _ln(ours, theirs, scale="scale", weight="weight", bias="bias"):
    return [(ours + scale, theirs + weight), (ours + "bias", theirs + bias)]


def _dense(ours, theirs, weight="weight"):
    return [(ours + "kernel", theirs + weight), (ours + "bias", theirs + "bias")]


# The original layout itself: every canonical key, for checking a normalised npz.
CANONICAL = (
    _pairs((k, k) for k in ("embedding/kernel", "embedding/bias", "cls", POSEMB))
    + _pairs((k, k) for k in (BLOCK + "LayerNorm_0/scale", BLOCK + "LayerNorm_0/bias"))
    + _pairs((ATTN + f"{n}/{p}", ATTN + f"{n}/{p}") for n in (*QKV, "out") for p in ("kernel", "bias"))
    + _pairs((k, k) for k in (BLOCK + "LayerNorm_2/scale", BLOCK + "LayerNorm_2/bias"))
    + _pairs((MLP + f"Dense_{j}/{p}", MLP + f"Dense_{j}/{p}") for j in (0, 1) for p in ("kernel", "bias"))
    + _pairs((k, k) for k in ("Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias"))
    + [Rule(("pre_logits/kernel", "pre_logits/bias"), ("pre_logits/kernel", "pre_logits/bias"), optional=True)]
    + [Rule(("head/kernel", "head/bias"), ("head/kernel", "head/bias"), optional=True)]
)


def _linear_rules(ours, theirs, optional=False):
    """A Dense layer: kernel (in, out) <-> PyTorch weight (out, in), bias as is."""
    (kernel, weight), (bias, torch_bias) = _dense(ours, theirs)
    return [Rule((kernel, bias), (weight, torch_bias), _flip_kernel, _flip_kernel, optional)]


def _flip_kernel(arrays, heads):
    return [arrays[0].transpose(1, 0), arrays[1]]


def _fused_qkv_to_ours(arrays, heads):
    weights = split_rows([arrays[0]], heads)
    biases = split_rows([arrays[1]], heads)
    return linear_to_heads(weights, heads) + bias_to_heads(biases, heads)


def _fused_qkv_to_theirs(arrays, heads):
    weights = heads_to_linear(arrays[:3], heads)
    biases = heads_to_bias(arrays[3:], heads)
    return join_rows(weights, heads) + join_rows(biases, heads)


def _torch_common(patch, cls, pos, ln1, ln2, out, fc1, fc2, norm, pre_logits, head):
    """Rules shared by the PyTorch layouts except the q/k/v projections."""
    return (
        [Rule(("embedding/kernel",), (patch + "weight",), conv_to_ours, conv_to_theirs)]
        + _pairs([("embedding/bias", patch + "bias"), ("cls", cls), (POSEMB, pos)])
        + _pairs(_ln(BLOCK + "LayerNorm_0/", ln1))
        + [Rule((ATTN + "out/kernel",), (out + "weight",), out_to_heads, heads_to_out)]
        + _pairs([(ATTN + "out/bias", out + "bias")])
        + _pairs(_ln(BLOCK + "LayerNorm_2/", ln2))
        + _linear_rules(MLP + "Dense_0/", fc1)
        + _linear_rules(MLP + "Dense_1/", fc2)
        + _pairs(_ln("Transformer/encoder_norm/", norm))
        + _linear_rules("pre_logits/", pre_logits, optional=True)
        + _linear_rules("head/", head, optional=True)
    )


TIMM = _torch_common(
    "patch_embed.proj.", "cls_token", "pos_embed", "blocks.{i}.norm1.", "blocks.{i}.norm2.",
    "blocks.{i}.attn.proj.", "blocks.{i}.mlp.fc1.", "blocks.{i}.mlp.fc2.", "norm.", "pre_logits.fc.", "head.",
) + [
    Rule(
        tuple(ATTN + f"{n}/kernel" for n in QKV) + tuple(ATTN + f"{n}/bias" for n in QKV),
        ("blocks.{i}.attn.qkv.weight", "blocks.{i}.attn.qkv.bias"),
        _fused_qkv_to_ours,
        _fused_qkv_to_theirs,
    )
]

HF_LAYER = "encoder.layer.{i}."
HF = _torch_common(
    "embeddings.patch_embeddings.projection.", "embeddings.cls_token", "embeddings.position_embeddings",
    HF_LAYER + "layernorm_before.", HF_LAYER + "layernorm_after.", HF_LAYER + "attention.output.dense.",
    HF_LAYER + "intermediate.dense.", HF_LAYER + "output.dense.", "layernorm.", "pooler.dense.", "classifier.",
) + [
    Rule(
        (ATTN + f"{n}/kernel", ATTN + f"{n}/bias"),
        (HF_LAYER + f"attention.attention.{n}.weight", HF_LAYER + f"attention.attention.{n}.bias"),
        lambda a, h: linear_to_heads(a[:1], h) + bias_to_heads(a[1:], h),
        lambda a, h: heads_to_linear(a[:1], h) + heads_to_bias(a[1:], h),
    )
    for n in QKV
]


def _qkv_kernel_to_ours(arrays, heads):
    return linear_to_heads(split_rows([arrays[0].transpose(1, 0)], heads), heads)


def _qkv_kernel_to_theirs(arrays, heads):
    return [concat([a.reshape(a.shape[0], -1) for a in arrays], axis=1)]


def _qkv_bias_to_ours(arrays, heads):
    return bias_to_heads(split_rows(arrays, heads), heads)


def _out_kernel_to_ours(arrays, heads):
    a = arrays[0]
    return [a.reshape(heads_of(a, heads, "attention"), -1, a.shape[1])]


KERAS_BLOCK = "encoder/encoderblock_{i}/"
KERAS = (
    _pairs([
        ("embedding/kernel", "embedding/kernel"),
        ("embedding/bias", "embedding/bias"),
        ("cls", "class_token/cls"),
        (POSEMB, "posembed_input/pos_embedding"),
    ])
    + _pairs(_ln(BLOCK + "LayerNorm_0/", KERAS_BLOCK + "ln_1/", weight="gamma", bias="beta"))
    + [
        Rule(tuple(ATTN + f"{n}/kernel" for n in QKV), (KERAS_BLOCK + "attention/qkv/kernel",),
             _qkv_kernel_to_ours, _qkv_kernel_to_theirs),
        Rule(tuple(ATTN + f"{n}/bias" for n in QKV), (KERAS_BLOCK + "attention/qkv/bias",),
             _qkv_bias_to_ours, lambda a, h: join_rows(heads_to_bias(a, h), h)),
        Rule((ATTN + "out/kernel",), (KERAS_BLOCK + "attention/out/kernel",),
             _out_kernel_to_ours, lambda a, h: [a[0].reshape(-1, a[0].shape[-1])]),
    ]
    + _pairs([(ATTN + "out/bias", KERAS_BLOCK + "attention/out/bias")])
    + _pairs(_ln(BLOCK + "LayerNorm_2/", KERAS_BLOCK + "ln_2/", weight="gamma", bias="beta"))
    + _pairs(_dense(MLP + "Dense_0/", KERAS_BLOCK + "mlp/dense_0/", weight="kernel"))
    + _pairs(_dense(MLP + "Dense_1/", KERAS_BLOCK + "mlp/dense_1/", weight="kernel"))
    + _pairs(_ln("Transformer/encoder_norm/", "encoder/encoder_norm/", weight="gamma", bias="beta"))
    + [Rule(("pre_logits/kernel", "pre_logits/bias"), ("pre_logits/kernel", "pre_logits/bias"), optional=True)]
    + [Rule(("head/kernel", "head/bias"), ("head/kernel", "head/bias"), optional=True)]
)

LAYOUTS = {"original": CANONICAL, "timm": TIMM, "hf": HF, "keras": KERAS}
