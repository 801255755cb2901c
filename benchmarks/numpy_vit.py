"""An independent NumPy implementation of the ViT forward pass (paper eq. 1-4): the float64
reference of the tests and of `bf16_error.py`; `reference_params` reads a keras_vit model into it."""

import math

import numpy as np


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def self_attention(x, p, num_heads):
    """`p`: q_w, k_w, v_w (dim, dim), q_b, k_b, v_b, o_w (dim, dim), o_b. Returns (out, weights)."""
    b, t, d = x.shape
    dh = d // num_heads

    def heads(w, bias):
        return (x @ w + bias).reshape(b, t, num_heads, dh).transpose(0, 2, 1, 3)

    q, k, v = heads(p["q_w"], p["q_b"]), heads(p["k_w"], p["k_b"]), heads(p["v_w"], p["v_b"])
    weights = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh))
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return context @ p["o_w"] + p["o_b"], weights


def block(x, p, num_heads, approximate_gelu):
    y, weights = self_attention(layer_norm(x, p["ln1_s"], p["ln1_b"]), p, num_heads)
    x = x + y
    h = gelu(layer_norm(x, p["ln2_s"], p["ln2_b"]) @ p["fc1_w"] + p["fc1_b"], approximate_gelu)
    return x + h @ p["fc2_w"] + p["fc2_b"], weights


def patchify(images, patch):
    b, h, w, c = images.shape
    x = images.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


def vit_forward(images, p, patch, num_heads, approximate_gelu=True, pooling="token"):
    """`p`: embed_w (P*P*C, D) in (row, col, channel) order, embed_b, cls (D,), pos (N+1, D),
    blocks (list of block dicts), norm_s, norm_b, optional head_w / head_b. Returns
    (output, per-block attention weights)."""
    x = patchify(images.astype(np.float64), patch) @ p["embed_w"] + p["embed_b"]
    cls = np.broadcast_to(p["cls"], (x.shape[0], 1, x.shape[-1]))
    x = np.concatenate([cls, x], axis=1) + p["pos"]
    attention = []
    for bp in p["blocks"]:
        x, w = block(x, bp, num_heads, approximate_gelu)
        attention.append(w)
    x = layer_norm(x, p["norm_s"], p["norm_b"])
    if "head_w" not in p:
        return x, attention
    feature = x[:, 0] if pooling == "token" else x[:, 1:].mean(1)
    return feature @ p["head_w"] + p["head_b"], attention


def reference_params(model, num_heads):
    """The variables of a keras_vit ViT as the parameter dict of `vit_forward`."""
    w = {v.path: np.asarray(value, np.float64) for v, value in zip(model.weights, model.get_weights())}
    kernel = w["embedding/kernel"]
    dim = kernel.shape[-1]
    p = {
        "embed_w": kernel.reshape(-1, dim),
        "embed_b": w["embedding/bias"],
        "cls": w["class_token/cls"].reshape(dim),
        "pos": w["posembed_input/pos_embedding"][0],
        "norm_s": w["encoder/encoder_norm/gamma"],
        "norm_b": w["encoder/encoder_norm/beta"],
        "blocks": [],
    }
    i = 0
    while f"encoder/encoderblock_{i}/ln_1/gamma" in w:
        pre = f"encoder/encoderblock_{i}/"
        qkv, qkv_b = w[pre + "attention/qkv/kernel"], w[pre + "attention/qkv/bias"]
        p["blocks"].append(
            {
                "ln1_s": w[pre + "ln_1/gamma"], "ln1_b": w[pre + "ln_1/beta"],
                "q_w": qkv[:, :dim], "k_w": qkv[:, dim : 2 * dim], "v_w": qkv[:, 2 * dim :],
                "q_b": qkv_b[:dim], "k_b": qkv_b[dim : 2 * dim], "v_b": qkv_b[2 * dim :],
                "o_w": w[pre + "attention/out/kernel"], "o_b": w[pre + "attention/out/bias"],
                "ln2_s": w[pre + "ln_2/gamma"], "ln2_b": w[pre + "ln_2/beta"],
                "fc1_w": w[pre + "mlp/dense_0/kernel"], "fc1_b": w[pre + "mlp/dense_0/bias"],
                "fc2_w": w[pre + "mlp/dense_1/kernel"], "fc2_b": w[pre + "mlp/dense_1/bias"],
            }
        )
        i += 1
    if "head/kernel" in w:
        p["head_w"], p["head_b"] = w["head/kernel"], w["head/bias"]
    return p
