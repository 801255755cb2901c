"""The token stream in float32 under mixed precision, as `torch.autocast` keeps it."""


class Float32Stream:
    """Mixin for the layers that carry the token (residual) stream: class token, position
    embedding, encoder and blocks. Under a mixed policy they take their inputs in the
    variables' dtype (float32) instead of the compute dtype, so the embeddings' sums and
    every residual addition stay float32 while the matmuls inside attention and MLP run in
    bfloat16 / float16. A residual stream rounded to bfloat16 at each of the 2 x depth adds
    loses accuracy against `torch.autocast` (benchmarks/bf16_error.py). Their own variables
    (class token, position embeddings) are created with `autocast=False`, so read in float32."""

    @property
    def input_dtype(self):
        return self.variable_dtype
