"""Dense + bias + exact GELU as one Pallas kernel (JAX), a variant of jax_gpu_profile.py.

XLA fuses the tanh GELU into cuBLASLt's matmul epilogue but not the exact (erf) one, which
then costs a separate pass over the (tokens, mlp_dim) activation (issue 33). This kernel
computes `h = x @ kernel + bias` in float32 tiles, writes `h` (the backward pass needs it, as
it does after XLA's matmul) and `gelu(h)` with the exact erf, each rounded once to the
output dtype. Its gradient (`jax.custom_vjp`) is plain JAX.

Whether it is faster than cuBLAS + XLA's GELU fusion can only be measured on a GPU, so it is
a benchmark variant, not library code. `dense_gelu` runs the Pallas kernel on a JAX GPU
(Triton) or with `interpret=True` (any device: the CPU tests), else the plain computation.
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
# Abramowitz & Stegun 7.1.26: |erf error| <= 1.5e-7, float32's own rounding; Pallas' Triton
# lowering has no erf.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x):
    """erf of a float32 array from exp and a polynomial (A&S 7.1.26)."""
    z = jnp.abs(x)
    t = 1.0 / (1.0 + _ERF_P * z)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    return jnp.sign(x) * (1.0 - poly * jnp.exp(-z * z))


def gelu(h):
    return 0.5 * h * (1.0 + erf(h * (1.0 / math.sqrt(2.0))))


def gelu_grad(h):
    """d gelu / dh = Phi(h) + h phi(h)."""
    return 0.5 * (1.0 + jax.lax.erf(h / math.sqrt(2.0))) + h * jnp.exp(-0.5 * h * h) / math.sqrt(2.0 * math.pi)


def _blocks(m, k, n):
    """Tile sizes (powers of two for Triton) dividing k and n, or None."""
    bn, bk = min(BLOCK_N, n), min(BLOCK_K, k)
    if n % bn or k % bk or bn & (bn - 1) or bk & (bk - 1):
        return None
    return min(BLOCK_M, pl.next_power_of_2(m)), bn, bk


def _kernel(x_ref, w_ref, b_ref, h_ref, y_ref, *, bm, bn, bk, precision):
    i, j = pl.program_id(0), pl.program_id(1)
    rows, cols = pl.ds(i * bm, bm), pl.ds(j * bn, bn)

    def accumulate(step, acc):
        depth = pl.ds(step * bk, bk)
        return acc + jnp.dot(x_ref[rows, depth], w_ref[depth, cols], precision=precision,
                             preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, x_ref.shape[1] // bk, accumulate, jnp.zeros((bm, bn), jnp.float32))
    h = acc + b_ref[cols].astype(jnp.float32)[None, :]
    h_ref[...] = h.astype(h_ref.dtype)
    y_ref[...] = gelu(h).astype(y_ref.dtype)


def _pallas(x2, kernel, bias, blocks, interpret):
    """`(h, gelu(h))` of a 2-D `x2` whose rows are a multiple of the row tile."""
    bm, bn, bk = blocks
    (m, _), n = x2.shape, kernel.shape[1]
    precision = jax.lax.Precision.HIGHEST if x2.dtype == jnp.float32 else None
    out = jax.ShapeDtypeStruct((m, n), x2.dtype)
    return pl.pallas_call(
        functools.partial(_kernel, bm=bm, bn=bn, bk=bk, precision=precision),
        out_shape=(out, out),
        grid=(m // bm, n // bn),
        out_specs=[pl.BlockSpec((bm, bn), lambda i, j: (i, j))] * 2,
        interpret=interpret,
        compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=3),
        name="dense_bias_gelu",
    )(x2, kernel, bias)


def _forward(x, kernel, bias, interpret):
    features, units = kernel.shape
    x2 = x.reshape(-1, features)
    blocks = _blocks(x2.shape[0], features, units)
    if blocks is None:
        h = jnp.dot(x2, kernel, preferred_element_type=jnp.float32) + bias.astype(jnp.float32)
        h, y = h.astype(x.dtype), jax.nn.gelu(h, approximate=False).astype(x.dtype)
    else:
        rows = x2.shape[0]
        x2 = jnp.pad(x2, ((0, -rows % blocks[0]), (0, 0)))
        h, y = (a[:rows] for a in _pallas(x2, kernel, bias.astype(x.dtype), blocks, interpret))
    shape = (*x.shape[:-1], units)
    return y.reshape(shape), h.reshape(shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _dense_gelu(x, kernel, bias, interpret):
    return _forward(x, kernel, bias, interpret)[0]


def _dense_gelu_fwd(x, kernel, bias, interpret):
    y, h = _forward(x, kernel, bias, interpret)
    return y, (x, kernel, bias, h)


def _dense_gelu_bwd(interpret, residuals, g):
    x, kernel, bias, h = residuals
    dh = (g.astype(jnp.float32) * gelu_grad(h.astype(jnp.float32))).astype(x.dtype)
    features, units = kernel.shape
    dh2, x2 = dh.reshape(-1, units), x.reshape(-1, features)
    dx = jnp.dot(dh, kernel.T, preferred_element_type=jnp.float32).astype(x.dtype)
    dkernel = jnp.dot(x2.T, dh2, preferred_element_type=jnp.float32).astype(kernel.dtype)
    dbias = dh2.astype(jnp.float32).sum(0).astype(bias.dtype)
    return dx, dkernel, dbias


_dense_gelu.defvjp(_dense_gelu_fwd, _dense_gelu_bwd)


def dense_gelu(x, kernel, bias, interpret=False):
    """`gelu(x @ kernel + bias)` (exact GELU) over the last axis of `x`, `kernel` and `bias`
    in `x`'s dtype: the Pallas kernel on a JAX GPU or with `interpret`, else plain JAX."""
    if interpret or jax.devices()[0].platform == "gpu":
        return _dense_gelu(x, kernel, bias, interpret)
    return jax.nn.gelu(jnp.dot(x, kernel) + bias, approximate=False)
