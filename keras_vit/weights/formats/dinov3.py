"""DINOv3 as PyTorch state dicts: timm's `vit_*_patch16_dinov3*` (its `Eva` layout:
`reg_token`, `gamma_1` / `gamma_2`, `q_bias` / `v_bias` in the `_qkvb` variants, none in the
others, `mlp.fc1_g` / `fc1_x` for SwiGLU) and Meta's own `.pth` files (`storage_tokens`,
`ls1.gamma`, a `qkv.bias` whose key part `bias_mask` zeroes, `mlp.w1` / `w2` / `w3` for SwiGLU),
read as `torch.load(weights_only=True)` would, without unpickling code (`containers`).
Both are renamed to timm's `VisionTransformer` names and read through its table; neither has
position embeddings (rotary, period 100) nor records its heads (see `known_num_heads`).
`export(format="timm_dinov3")` writes timm's layout (`_qkvb` names where the model has q / v biases)."""

import re

import numpy as np

from keras_vit.weights import containers
from keras_vit.weights.canonical import POSEMB, Metadata
from keras_vit.weights.formats import timm
from keras_vit.weights.formats.base import BLOCK_OPTIONS, Format
from keras_vit.weights.lazy import LazyArray, concat
from keras_vit.weights.table import Table

THETA, EPSILON = 100.0, 1e-5  # DINOv3's rope period and LayerNorm epsilon (timm's `partial(LayerNorm, eps=1e-5)`)

# Eva / Meta key -> timm VisionTransformer key (regular expressions, applied in order).
_RENAMES = (
    (r"^storage_tokens$", "reg_token"),
    (r"\.gamma_(\d)$", r".ls\1.gamma"),
    (r"\.mlp\.w3\.", ".mlp.fc2."),
)
# Pre-training only, or buffers computed again: the mask token, rope periods, the key-bias mask,
# the 7B model's norm of the local crops' class tokens.
_DROPPED = re.compile(r"^(mask_token|rope_embed\..*|rope\..*|local_cls_norm\..*)$|\.bias_mask$")
# The two halves of a SwiGLU's first layer, gate first: timm's Eva `SwiGLU`, Meta's `SwiGLUFFN`.
_GATES = ((".mlp.fc1_g.", ".mlp.fc1_x."), (".mlp.w1.", ".mlp.w2."))


def detect(raw):
    keys = raw.tensors.keys()
    return "patch_embed.proj.weight" in keys and "pos_embed" not in keys and (
        "reg_token" in keys or "storage_tokens" in keys)


def _qkv_bias(query, value, source):
    """`[q | 0 | v]`: the key part zero (DINOv3 has none; `key_bias=False` drops it)."""
    zeros = LazyArray.wrap(np.zeros(query.shape, np.float32), "zero key bias")
    return concat([query, zeros, value], axis=0, source=source)


def prepare(raw):
    """The state dict in timm `VisionTransformer` names (`formats.timm.TABLE`)."""
    tensors = {}
    for key, value in raw.tensors.items():
        if _DROPPED.search(key):
            continue
        for pattern, name in _RENAMES:
            key = re.sub(pattern, name, key)
        tensors[key] = value
    for key in [k for k in tensors if k.endswith(".attn.q_bias")]:
        prefix = key[: -len("q_bias")]
        if prefix + "v_bias" in tensors:  # else the table names the unmatched key
            tensors[prefix + "qkv.bias"] = _qkv_bias(tensors.pop(key), tensors.pop(prefix + "v_bias"), key)
    for key in [k for k in tensors if k.endswith(".attn.qkv.bias")]:
        bias, width = tensors[key], tensors[key].shape[0] // 3
        tensors[key] = _qkv_bias(bias.rows(0, width), bias.rows(2 * width, 3 * width), key)
    for gate, value in _GATES:
        for key in [k for k in tensors if gate in k]:
            other = key.replace(gate, value)
            if other in tensors:
                tensors[key.replace(gate, ".mlp.fc1.")] = concat([tensors.pop(key), tensors.pop(other)], axis=0)
    return tensors


def metadata(raw, tensors):
    return Metadata(approximate_gelu=False, layer_norm_epsilon=EPSILON, preprocessing="dinov3", rope_theta=THETA,
                    key_bias=False)


def _eva_names(tensors):
    """timm `VisionTransformer` names -> timm's Eva DINOv3 names (the inverse of `prepare` for its layout)."""
    out = {}
    for key, value in tensors.items():
        if key.endswith(".attn.qkv.bias"):
            width = value.shape[0] // 3
            out[key.replace("qkv.bias", "q_bias")] = value.rows(0, width)
            out[key.replace("qkv.bias", "v_bias")] = value.rows(2 * width, 3 * width)
        else:
            out[re.sub(r"\.ls(\d)\.gamma$", r".gamma_\1", key)] = value
    return out


def write(path, ckpt):
    """timm's `vit_*_patch16_dinov3*` state dict as `.safetensors`: SwiGLU as `mlp.fc1_g` / `fc1_x`."""
    if ckpt.position_embedding != "rope" or ckpt.rope_theta != THETA or ckpt.rope_form not in (None, "dinov3"):
        raise ValueError(f"{ckpt.path}: timm's DINOv3 layout holds rotary models of DINOv3's form and period {THETA:g} only "
                         f"(rope_theta={ckpt.rope_theta}, rope_form={ckpt.rope_form}); "
                         + ("use format='timm_eva'." if ckpt.rope_form in ("axial", "mixed") else
                            "save it with model.save('x.keras')." if ckpt.position_embedding == "rope" else "use format='timm'."))
    ckpt.require_class_token_head("timm_dinov3")
    tensors = _eva_names(FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to timm_dinov3"))
    if ckpt.mlp == "swiglu":
        for key in [k for k in tensors if ".mlp.fc1." in k]:
            value = tensors.pop(key)
            half = value.shape[0] // 2
            tensors[key.replace(".fc1.", ".fc1_g.")] = value.rows(0, half)
            tensors[key.replace(".fc1.", ".fc1_x.")] = value.rows(half, 2 * half)
    containers.write_safetensors(path, {k: v.astype(np.float32) for k, v in tensors.items()}, {"format": "pt"})


FORMAT = Format(
    name="dinov3_torch",
    table=Table(tuple(row for row in timm.TABLE.rows if row.canonical[0].text != POSEMB)),
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    export_name="timm_dinov3",
    writes_rope=True,
    block_options=BLOCK_OPTIONS,
)
