"""The transformer MLP block: Dense -> GELU -> Dropout -> Dense -> Dropout."""

import keras
from keras import ops

from keras_vit.layers.linear import Linear
from keras_vit.layers.norms import normalization
from keras_vit.layers.sublayer import run


@keras.saving.register_keras_serializable(package="keras_vit")
class MLPBlock(keras.layers.Layer):
    """Position-wise MLP with hidden width `mlp_dim`.

    `approximate_gelu=True` is the tanh approximation of the original Flax code;
    `False` is the exact erf GELU of timm and transformers. Subclasses change the hidden
    activation (`activate`) and how many columns per hidden unit `dense_0` has (`packed`).
    `bias=False`: both layers without bias. `hidden_norm` ("layernorm" / "rmsnorm", epsilon
    `epsilon`): a norm of the hidden features before `dense_1` (EVA-02's `scale_mlp`), None: none.
    `quick_gelu=True`: OpenAI CLIP's `x * sigmoid(1.702 x)` instead of GELU.
    """

    packed = 1

    def __init__(self, mlp_dim, dropout_rate=0.0, approximate_gelu=True, seed=None, bias=True, hidden_norm=None,
                 epsilon=1e-6, quick_gelu=False, **kwargs):
        super().__init__(**kwargs)
        self.quick_gelu = bool(quick_gelu)
        self.hidden_norm, self.epsilon = hidden_norm, float(epsilon)
        self.norm = None if hidden_norm is None else normalization(hidden_norm, self.epsilon, "norm", self.dtype_policy)
        self.bias = bool(bias)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.seed = seed
        self.dropout = keras.layers.Dropout(self.dropout_rate, seed=seed, dtype=self.dtype_policy)

    def build(self, input_shape):
        init = dict(
            use_bias=self.bias,
            kernel_initializer=keras.initializers.GlorotUniform(),
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=self.dtype_policy,
        )
        self.dense_0 = Linear(self.packed * self.mlp_dim, name="dense_0", **init)
        self.dense_0.build(input_shape)
        self.dense_1 = Linear(input_shape[-1], name="dense_1", **init)
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))
        if self.norm is not None:
            self.norm.build((*input_shape[:-1], self.mlp_dim))
        self.dropout.build(None)  # called through `run`, which does not mark it built

    def call(self, x, training=None):
        x = run(self.dropout, self.activate(run(self.dense_0, x)), training=training)
        if self.norm is not None:
            x = run(self.norm, x)
        return run(self.dropout, run(self.dense_1, x), training=training)

    def activate(self, hidden):
        if self.quick_gelu:
            return hidden * ops.sigmoid(1.702 * hidden)
        return ops.gelu(hidden, approximate=self.approximate_gelu)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "approximate_gelu": self.approximate_gelu,
            "seed": self.seed,
            "bias": self.bias,
            "hidden_norm": self.hidden_norm,
            "epsilon": self.epsilon,
            "quick_gelu": self.quick_gelu,
        }
