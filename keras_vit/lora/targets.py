"""The encoder projections LoRA adapts, by name. Plain Python: the training config checks them
before Keras is imported."""

LORA_TARGETS = ("qkv", "out", "mlp")  # the encoder projections LoRA adapts (`keras_vit.lora.adapter`)


def parse_lora_targets(targets):
    """"qkv,out" or a sequence of names -> a tuple of `LORA_TARGETS` names, or a ValueError."""
    names = tuple(t.strip() for t in targets.split(",")) if isinstance(targets, str) else tuple(targets)
    if not names or any(name not in LORA_TARGETS for name in names):
        raise ValueError(f"lora_targets={targets!r}: expected names among {', '.join(LORA_TARGETS)}, e.g. qkv,out.")
    return names
