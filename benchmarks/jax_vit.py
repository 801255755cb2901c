"""A plain JAX ViT (the vit_jax structure, no Flax) as the JAX reference of `throughput.py`.

Pre-norm blocks, fused qkv, exact GELU, class-token head; parameters float32, computation in
bfloat16 for "mixed_bfloat16" (LayerNorm, softmax and the residual stream float32, as
`torch.autocast`), attention by `jax.nn.dot_product_attention`: on a GPU in bfloat16 q/k/v are
padded to a multiple of 64 tokens with length masks so that cuDNN's flash kernel takes them
(forward and backward), elsewhere XLA's. AdamW written out (no optax here). One jitted step,
parameters and optimizer state donated.
"""

import numpy as np

LEARNING_RATE, WEIGHT_DECAY, BETAS, EPSILON = 1e-4, 0.05, (0.9, 0.999), 1e-8


def init_params(arch, resolution, classes, seed=0):
    patch, width, depth, _heads, mlp = arch
    rng = np.random.default_rng(seed)

    def dense(n_in, n_out):
        return {"w": rng.normal(0, np.sqrt(2 / (n_in + n_out)), (n_in, n_out)).astype("float32"),
                "b": np.zeros(n_out, "float32")}

    def norm():
        return {"scale": np.ones(width, "float32"), "bias": np.zeros(width, "float32")}

    tokens = (resolution // patch) ** 2 + 1
    return {
        "embed": dense(patch * patch * 3, width),
        "cls": np.zeros((1, 1, width), "float32"),
        "pos": rng.normal(0, 0.02, (1, tokens, width)).astype("float32"),
        "blocks": [{"ln1": norm(), "qkv": dense(width, 3 * width), "out": dense(width, width),
                    "ln2": norm(), "fc1": dense(width, mlp), "fc2": dense(mlp, width)} for _ in range(depth)],
        "norm": norm(),
        "head": dense(width, classes),
    }


def _attention_fn(dtype):
    import jax
    import jax.numpy as jnp

    cudnn = jax.devices()[0].platform == "gpu" and dtype == jnp.bfloat16

    def attention(q, k, v):
        if not cudnn:
            return jax.nn.dot_product_attention(q, k, v, implementation="xla")
        batch, tokens = q.shape[0], q.shape[1]
        pad = ((0, 0), (0, -tokens % 64), (0, 0), (0, 0))
        q, k, v = (jnp.pad(t, pad) for t in (q, k, v))
        lengths = jnp.full((batch,), tokens, jnp.int32)
        out = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                           implementation="cudnn")
        return out[:, :tokens]

    return attention


def make_forward(arch, dtype):
    import jax
    import jax.numpy as jnp

    patch, width, _depth, heads, _mlp = arch
    attention = _attention_fn(dtype)

    def dense(p, x):
        return x.astype(dtype) @ p["w"].astype(dtype) + p["b"].astype(dtype)

    def norm(p, x):
        x = x.astype(jnp.float32)
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-6) * p["scale"] + p["bias"]

    def forward(params, images):
        b, h, w, c = images.shape
        x = images.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
        x = dense(params["embed"], x.reshape(b, -1, patch * patch * c)).astype(jnp.float32)
        x = jnp.concatenate([jnp.broadcast_to(params["cls"], (b, 1, width)), x], axis=1) + params["pos"]
        for p in params["blocks"]:
            qkv = dense(p["qkv"], norm(p["ln1"], x)).reshape(b, x.shape[1], 3, heads, width // heads)
            y = attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]).reshape(b, x.shape[1], width)
            x = x + dense(p["out"], y)
            x = x + dense(p["fc2"], jax.nn.gelu(dense(p["fc1"], norm(p["ln2"], x)), approximate=False))
        return dense(params["head"], norm(params["norm"], x)[:, 0]).astype(jnp.float32)

    return forward


def make_train_step(forward):
    import jax
    import jax.numpy as jnp

    def loss_fn(params, images, labels):
        logits = forward(params, images)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1))

    def step(params, opt, images, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
        count = opt["count"] + 1
        mu = jax.tree.map(lambda m, g: BETAS[0] * m + (1 - BETAS[0]) * g, opt["mu"], grads)
        nu = jax.tree.map(lambda v, g: BETAS[1] * v + (1 - BETAS[1]) * g * g, opt["nu"], grads)
        c1, c2 = 1 - BETAS[0] ** count, 1 - BETAS[1] ** count

        def update(p, m, v):
            return p - LEARNING_RATE * ((m / c1) / (jnp.sqrt(v / c2) + EPSILON) + WEIGHT_DECAY * p)

        params = jax.tree.map(update, params, mu, nu)
        return params, {"count": count, "mu": mu, "nu": nu}, loss

    return jax.jit(step, donate_argnums=(0, 1))


class JaxViTRunner:
    """`throughput.py`'s runner interface for the plain JAX ViT."""

    def __init__(self, cfg):
        import jax
        import jax.numpy as jnp

        from workload import ARCHITECTURES, NUM_CLASSES, batch

        arch = ARCHITECTURES[cfg["variant"]]
        dtype = jnp.bfloat16 if cfg["precision"] == "mixed_bfloat16" else jnp.float32
        self.params = jax.device_put(init_params(arch, cfg["resolution"], NUM_CLASSES))
        self.opt = {"count": jnp.zeros((), jnp.int32), "mu": jax.tree.map(jnp.zeros_like, self.params),
                    "nu": jax.tree.map(jnp.zeros_like, self.params)}
        images, labels = batch(cfg)
        self.images, self.labels = jax.device_put(images), jax.device_put(labels)
        forward = make_forward(arch, dtype)
        self.forward = jax.jit(forward)
        self.step = make_train_step(forward)

    def infer(self):
        return np.asarray(self.forward(self.params, self.images))

    def train(self):
        self.params, self.opt, loss = self.step(self.params, self.opt, self.images, self.labels)
        return float(loss)
