"""Small test utilities shared by several test modules."""

import numpy as np


def randomize(model, seed=0, scale=0.2):
    """Gives every variable random values (LayerNorm scales near 1), so no weight is trivial."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in model.weights:
        shape = tuple(variable.shape)
        if variable.path.endswith("gamma"):
            values.append(1.0 + scale * rng.standard_normal(shape))
        else:
            values.append(scale * rng.standard_normal(shape))
    model.set_weights([v.astype(np.float32) for v in values])
    return model


def reference_params(model, num_heads):
    """The variables of a keras_vit ViT as the parameter dict of `tests.reference.vit_forward`."""
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
