"""Pre-norm transformer encoder block (paper eq. 2-3)."""

import keras
from keras import ops

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import MLPBlock
from keras_vit.layers.norms import normalization
from keras_vit.layers.residual import Float32Stream
from keras_vit.layers.rope import THETA
from keras_vit.layers.sublayer import run
from keras_vit.layers.swiglu import SwiGLUBlock
from keras_vit.config.vit_config import MLPS, NORMS
from keras_vit.variants import LAYER_NORM_EPSILON


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(Float32Stream, keras.layers.Layer):
    """`x + MSA(LN(x))`, then `x + MLP(LN(x))`, with dropout and optional stochastic depth.

    `mlp="swiglu"` uses `SwiGLUBlock` instead of the GELU MLP; `layer_scale_init` (a float)
    scales each branch by a learned `LayerScale` (`ls_1`, `ls_2`) starting at that value.
    `call(x, rope=coordinates)` rotates the patch tokens' queries and keys (`rope_theta`, `rope_form`);
    `call(x, valid=mask)` attends only to the tokens where the `(batch, tokens)` mask is True,
    `call(x, segment_ids=ids)` only within each token's segment, `causal=True` each token only to those up
    to itself (a text tower's mask);
    `key_bias=False` drops the key bias, `qkv_bias` / `proj_bias` / `qk_norm` are
    `MultiHeadSelfAttention`'s; `mlp_bias=False`: an MLP without biases; `norm="rmsnorm"`:
    RMSNorm (`keras_vit.layers.norms`) for `ln_1`, `ln_2` (and the query / key norms);
    `mlp_norm=True`: a norm of that kind in the MLP before its output layer (EVA-02);
    `attention_norm=True`: one in the attention before its output projection (EVA-CLIP's sub-LN);
    `quick_gelu=True`: the GELU MLP's activation is `x * sigmoid(1.702 x)` (OpenAI CLIP).

    LayerNorm / RMSNorm run in float32 under mixed precision (Keras' LayerNormalization upcasts), and
    so does the residual stream `x` (`Float32Stream`).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        approximate_gelu=True,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        seed=None,
        mlp="gelu",
        layer_scale_init=None,
        rope_theta=THETA,
        rope_form="dinov3",
        key_bias=True,
        qkv_bias=True,
        proj_bias=True,
        mlp_bias=True,
        qk_norm=False,
        causal=False,
        norm="layernorm",
        mlp_norm=False,
        quick_gelu=False,
        attention_norm=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.seed = seed
        if mlp not in MLPS:
            raise ValueError(f"Unknown mlp={mlp!r}; expected one of {MLPS}.")
        self.mlp_kind = mlp
        if norm not in NORMS:
            raise ValueError(f"Unknown norm={norm!r}; expected one of {NORMS}.")
        self.norm = norm
        self.mlp_bias = bool(mlp_bias)
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        policy = self.dtype_policy
        self.ln_1 = normalization(norm, self.layer_norm_epsilon, "ln_1", policy)
        self.attention = MultiHeadSelfAttention(
            num_heads, attention_dropout_rate, seed=seed, rope_theta=rope_theta, rope_form=rope_form, key_bias=key_bias, qkv_bias=qkv_bias,
            proj_bias=proj_bias, qk_norm=qk_norm, norm=norm, layer_norm_epsilon=self.layer_norm_epsilon,
            causal=causal, out_norm=attention_norm, name="attention", dtype=policy,
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=policy)
        self.ln_2 = normalization(norm, self.layer_norm_epsilon, "ln_2", policy)
        block = SwiGLUBlock if mlp == "swiglu" else MLPBlock
        self.mlp = block(mlp_dim, dropout_rate, approximate_gelu, seed=seed, bias=mlp_bias, name="mlp", dtype=policy,
                         hidden_norm=norm if mlp_norm else None, epsilon=self.layer_norm_epsilon,
                         quick_gelu=quick_gelu)
        self.drop_path = DropPath(self.drop_path_rate, seed=seed, dtype=policy)
        self.scales = ()
        if self.layer_scale_init is not None:
            self.scales = tuple(
                LayerScale(self.layer_scale_init, name=f"ls_{j}", dtype=policy) for j in (1, 2)
            )

    def build(self, input_shape):
        for layer in (self.ln_1, self.attention, self.dropout, self.ln_2, self.mlp, self.drop_path, *self.scales):
            layer.build(input_shape)

    def _scaled(self, j, y):
        return run(self.scales[j], y) if self.scales else y

    def call(self, x, rope=None, valid=None, segment_ids=None, training=None, return_attention_weights=False):
        y = run(
            self.attention, run(self.ln_1, x), rope=rope, valid=valid, segment_ids=segment_ids, training=training,
            return_attention_weights=return_attention_weights,
        )
        if return_attention_weights:
            y, weights = y
        # ops.add promotes the bfloat16 branch to the float32 stream (TensorFlow's `+` does not).
        y = self._scaled(0, run(self.dropout, y, training=training))
        x = ops.add(x, run(self.drop_path, y, training=training))
        y = self._scaled(1, run(self.mlp, run(self.ln_2, x), training=training))
        x = ops.add(x, run(self.drop_path, y, training=training))
        return (x, weights) if return_attention_weights else x

    def compute_output_shape(self, x_shape, rope_shape=None, valid_shape=None, segment_ids_shape=None):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "seed": self.seed,
            "mlp": self.mlp_kind,
            "layer_scale_init": self.layer_scale_init,
            "rope_theta": self.attention.rope_theta,
            "rope_form": self.attention.rope_form,
            "key_bias": self.attention.key_bias,
            "qkv_bias": self.attention.qkv_bias,
            "proj_bias": self.attention.proj_bias,
            "mlp_bias": self.mlp_bias,
            "qk_norm": self.attention.qk_norm,
            "causal": self.attention.causal,
            "norm": self.norm,
            "mlp_norm": self.mlp.hidden_norm is not None,
            "quick_gelu": self.mlp.quick_gelu,
            "attention_norm": self.attention.out_norm is not None,
        }
