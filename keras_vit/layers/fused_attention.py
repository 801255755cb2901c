"""Scaled dot-product attention with a cuDNN flash path for training on JAX GPUs.

cuDNN's flash attention on JAX refuses most token counts in the backward pass (ViT-B/16's 197:
"Unsupported sequence length"), so Keras' `ops.dot_product_attention` falls back to XLA's
unfused attention while training. Padding q/k/v along the tokens to a multiple of 64 and
passing the true length as `query_seq_lengths` / `key_value_seq_lengths` makes cuDNN accept
them: padded keys are masked out of every softmax and padded query rows are zeroed, so the
sliced result, and its gradient, are those of the unpadded attention.
"""

import functools

import keras
from keras import ops

PAD_MULTIPLE = 64


def padded_attention(q, k, v, implementation=None, multiple=PAD_MULTIPLE):
    """`softmax(q k^T / sqrt(d)) v` over `(batch, tokens, heads, head_dim)` JAX arrays,
    computed by `jax.nn.dot_product_attention(implementation=...)` on q/k/v padded to a
    multiple of `multiple` tokens with length masks, the padding sliced off."""
    import jax
    import jax.numpy as jnp

    batch, tokens = q.shape[0], q.shape[1]
    padding = ((0, 0), (0, -tokens % multiple), (0, 0), (0, 0))
    q, k, v = (jnp.pad(t, padding) for t in (q, k, v))
    lengths = jnp.full((batch,), tokens, dtype=jnp.int32)
    out = jax.nn.dot_product_attention(
        q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths, implementation=implementation
    )
    return out[:, :tokens]


@functools.lru_cache(maxsize=None)
def padded_implementation(dtype, head_dim):
    """"cudnn" if this process runs JAX on a CUDA GPU whose cuDNN compiles the padded flash
    attention, forward and backward, for `dtype` and `head_dim` (probed once per pair on a
    tiny input; cuDNN takes only float16 / bfloat16 and head sizes it supports), else None."""
    if keras.backend.backend() != "jax":
        return None
    import jax
    import jax.numpy as jnp

    if jax.devices()[0].platform != "gpu" or dtype not in ("float16", "bfloat16"):
        return None
    probe = jnp.zeros((1, 3, 1, head_dim), dtype)

    def loss(q):
        return padded_attention(q, q, q, implementation="cudnn").astype(jnp.float32).sum()

    try:
        jax.jit(jax.grad(loss)).lower(probe).compile()
    except Exception:  # cuDNN missing, too old, or refusing the shape / dtype
        return None
    return "cudnn"


def torch_attention(q, k, v, mask=None):
    """PyTorch: `scaled_dot_product_attention` on the heads-first views of q/k/v, which
    picks the flash / memory-efficient kernel itself (the CPU flash kernel included); `mask`:
    the `(batch, 1, 1, tokens)` keys attended to.

    Keras' `ops.dot_product_attention` computes the same, but either runs its flash-attention
    probe, a pybind11 `SDPAParams` that torch.compile cannot trace (a graph break in every
    block; keras-team/keras#23327), or, with `flash_attention=False`, copies q, k and v to
    contiguous tensors first (3 copies per block, forward and backward)."""
    import torch

    q, k, v = (ops.convert_to_tensor(t).transpose(1, 2) for t in (q, k, v))
    mask = None if mask is None else ops.convert_to_tensor(mask)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2)


def dot_product_attention(q, k, v, training=False, mask=None):
    """Attention over `(batch, tokens, heads, head_dim)`: the padded cuDNN kernel when
    training on a JAX GPU that has it, `torch_attention` on PyTorch for q/k/v of one dtype,
    `keras.ops.dot_product_attention` everywhere else (inference included, where Keras
    already picks cuDNN for any length). `mask`: None, the boolean `(batch, tokens)` keys
    that may be attended to (NaFlex's valid patches), or `(batch, queries, keys)` pairs (packed
    segments)."""
    backend = keras.backend.backend()
    if mask is not None:
        # expand_dims, not `mask[:, None]`: LiteRT runs no strided slice that adds axes
        mask = ops.cast(ops.expand_dims(ops.expand_dims(mask, 1), 1) if len(mask.shape) == 2 else ops.expand_dims(mask, 1),
                        "bool")
    if backend == "torch" and q.dtype == k.dtype == v.dtype:
        return torch_attention(q, k, v, mask)
    if mask is not None:
        heads, tokens = ops.shape(q)[2], ops.shape(q)[1]
        mask = ops.broadcast_to(mask, (ops.shape(q)[0], heads, tokens, ops.shape(k)[1]))
        return ops.dot_product_attention(q, k, v, mask=mask, flash_attention=False if backend == "torch" else None)
    if training:
        implementation = padded_implementation(keras.backend.standardize_dtype(q.dtype), q.shape[-1])
        if implementation is not None:
            return padded_attention(q, k, v, implementation=implementation)
    return ops.dot_product_attention(q, k, v, flash_attention=False if backend == "torch" else None)
