"""The benchmarked models and their inference / training steps.

Imported only inside a worker process (see `worker.py`), whose `KERAS_BACKEND` is already
set. Every framework gets the same work: a ViT of the requested variant with a 1000-class
linear head on the class token, exact (erf) GELU, no dropout, random images in [-1, 1],
AdamW (lr 1e-4, weight decay 0.05) on softmax cross-entropy, the same batch, resolution and
precision.
"""

from workload import ARCHITECTURES, LEARNING_RATE, NUM_CLASSES, TIMM_NAMES, WEIGHT_DECAY, batch


def device_tensor(array):
    """`array` as a tensor of the Keras backend, resident on its first device (the GPU where
    there is one), so that a step reads it without a host-to-device copy."""
    import keras

    tensor = keras.ops.convert_to_tensor(array)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if tf.config.list_logical_devices("GPU"):
            with tf.device("GPU:0"):
                tensor = tf.identity(tensor)
    return tensor


def _repeated(count, item):
    for _ in range(count):
        yield item


class KerasRunner:
    """keras_vit or keras-hub through the ordinary Keras path: `compile()` then
    `predict_on_batch` / `train_on_batch`, or with `cfg["loop"] == "fit"` `fit` / `predict`
    over the batch repeated, on a batch already on the device; `cfg["quantize"]`:
    `model.quantize(...)` first (Keras' float8 training)."""

    def __init__(self, cfg):
        import keras

        self.keras = keras
        keras.config.set_dtype_policy(cfg["precision"])
        keras.utils.set_random_seed(0)
        self.model = self._build(cfg)
        if cfg.get("quantize"):
            self.model.quantize(cfg["quantize"])
        if cfg.get("loop") == "fit":
            self.train_steps, self.infer_steps = self._fit, self._predict
        backend = keras.backend.backend()
        jit = cfg["torch_compile"] if backend == "torch" else cfg["jit"]
        self.model.compile(
            optimizer=keras.optimizers.AdamW(learning_rate=LEARNING_RATE, weight_decay=WEIGHT_DECAY),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit,
        )
        self.images, self.labels = (device_tensor(a) for a in batch(cfg))

    def _build(self, cfg):
        raise NotImplementedError

    def infer(self):
        return self.model.predict_on_batch(self.images)

    def train(self):
        return self.model.train_on_batch(self.images, self.labels)

    def _fit(self, steps):
        batches = _repeated(steps, (self.images, self.labels))
        self.model.fit(batches, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)

    def _predict(self, steps):
        self.model.predict(_repeated(steps, (self.images,)), steps=steps, verbose=0)


class KerasViTRunner(KerasRunner):
    """keras_vit's `VisionTransformer` of `cfg["variant"]`, or of `cfg["architecture"]`
    (patch, width, depth, heads, MLP) when given (torch_profile.py's tiny model); tanh GELU
    with `cfg["approximate_gelu"]` (a variant of jax_gpu_profile.py)."""

    def _build(self, cfg):
        from keras_vit import VisionTransformer

        patch, width, depth, heads, mlp = cfg.get("architecture") or ARCHITECTURES[cfg["variant"]]
        size = cfg["resolution"]
        return VisionTransformer(
            patch,
            width,
            depth,
            heads,
            mlp,
            input_shape=(size, size, 3),
            classes=NUM_CLASSES,
            classifier_activation=None,
            approximate_gelu=cfg.get("approximate_gelu", False),
            remat=cfg.get("remat", False),
        )


class KerasHubRunner(KerasRunner):
    def _build(self, cfg):
        import keras_hub

        keras = self.keras
        patch, width, depth, heads, mlp = ARCHITECTURES[cfg["variant"]]
        size = cfg["resolution"]
        backbone = keras_hub.models.ViTBackbone(
            image_shape=(size, size, 3),
            patch_size=patch,
            num_layers=depth,
            num_heads=heads,
            hidden_dim=width,
            mlp_dim=mlp,
        )
        images = keras.Input((size, size, 3))
        tokens = backbone(images)
        logits = keras.layers.Dense(NUM_CLASSES, name="head")(tokens[:, 0])
        logits = keras.layers.Activation("linear", dtype="float32")(logits)
        return keras.Model(images, logits)


class TorchRunner:
    """A PyTorch reference with the usual loop: on the GPU when there is one (the batch
    resident there), autocast for bf16, `torch.optim.AdamW`, `torch.compile(model)` when
    asked."""

    def __init__(self, cfg):
        import torch

        self.torch = torch
        torch.manual_seed(0)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = self._build(cfg).to(self.device)
        images, labels = batch(cfg)
        self.images = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(self.device)
        self.labels = torch.from_numpy(labels).long().to(self.device)
        self.bf16 = cfg["precision"] == "mixed_bfloat16"
        self.forward = torch.compile(self.model) if cfg["torch_compile"] else self.model
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        self.model.train(cfg["mode"] == "training")

    def _build(self, cfg):
        raise NotImplementedError

    def _logits(self):
        with self.torch.autocast(self.device, dtype=self.torch.bfloat16, enabled=self.bf16):
            out = self.forward(self.images)
        return out.logits if hasattr(out, "logits") else out

    def infer(self):
        with self.torch.inference_mode():
            return self._logits().float().cpu().numpy()

    def train(self):
        loss = self.torch.nn.functional.cross_entropy(self._logits().float(), self.labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


class TransformersRunner(TorchRunner):
    def _build(self, cfg):
        from transformers import ViTConfig, ViTForImageClassification

        patch, width, depth, heads, mlp = ARCHITECTURES[cfg["variant"]]
        config = ViTConfig(
            hidden_size=width,
            num_hidden_layers=depth,
            num_attention_heads=heads,
            intermediate_size=mlp,
            image_size=cfg["resolution"],
            patch_size=patch,
            num_labels=NUM_CLASSES,
            layer_norm_eps=1e-6,
            attn_implementation="sdpa",
        )
        return ViTForImageClassification(config)


class TimmRunner(TorchRunner):
    def _build(self, cfg):
        import timm

        return timm.create_model(
            TIMM_NAMES[cfg["variant"]], pretrained=False, img_size=cfg["resolution"], num_classes=NUM_CLASSES
        )


def _jax_vit(cfg):
    from jax_vit import JaxViTRunner

    return JaxViTRunner(cfg)


RUNNERS = {
    "keras_vit": KerasViTRunner,
    "keras_hub": KerasHubRunner,
    "transformers": TransformersRunner,
    "timm": TimmRunner,
    "jax_vit": _jax_vit,
}


def make_runner(cfg):
    """The runner of `cfg["framework"]` (a `RUNNERS` key)."""
    return RUNNERS[cfg["framework"]](cfg)
