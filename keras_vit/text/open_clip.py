"""OpenCLIP's text tower (`open_clip.transformer.TextTransformer`, the CLIP models' own): the keys
of `open_clip_model.safetensors` / `open_clip_pytorch_model.bin` beside the `visual.*` image
tower, renamed to transformers' `CLIPTextModel` names so that `reading.keras_weights` assigns them.

Keys: `token_embedding.weight` `(vocab, width)`, `positional_embedding` `(context, width)`,
`transformer.resblocks.{i}.` `ln_1`, `attn.in_proj_weight` / `in_proj_bias` (q, k, v rows),
`attn.out_proj`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`, `ln_final`, `text_projection` `(width, dim)`
used as `x @ text_projection`, `logit_scale` (and SigLIP's `logit_bias`). The architecture comes
from the shapes, the head count from `open_clip_config.json`'s `model_cfg.text_cfg.heads` (else
width / 64, as every named CLIP), the activation from `model_cfg.quick_gelu`. The causal mask is
OpenCLIP's default; it pools at the end-of-text token (its `argmax` of the ids: end-of-text has
the largest id of its vocabulary), read from the folder's tokenizer files. Text towers built
otherwise (`hf_model_name`, `no_causal_mask`, another `pool_type`, `embed_cls`, LayerScale, a
projection bias) are refused in one line. OpenCLIP's `CustomTextCLIP` models (`custom_text`: EVA-CLIP's
`EVA02-*`) hold the same tower under `text.`, read alike."""

from keras_vit.text.config import TextConfig
from keras_vit.text.tokenizers import tokenizer_from_folder

BLOCK = "transformer.resblocks.{i}."
HEAD_WIDTH = 64
CUSTOM = "text."  # `CustomTextCLIP`'s text tower prefix (its `logit_scale` at the top)
# text_cfg settings of OpenCLIP's `CLIPTextCfg` this reader takes only at their default
DEFAULTS = {"hf_model_name": None, "no_causal_mask": False, "pool_type": "argmax", "embed_cls": False,
            "ls_init_value": None, "proj_bias": False, "final_ln_after_pool": False, "proj_type": "linear",
            "norm_kwargs": {}, "act_kwargs": {}}
RENAMES = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj", "mlp.c_fc": "mlp.fc1",
           "mlp.c_proj": "mlp.fc2"}


def is_open_clip(tensors):
    """Whether `tensors` (a checkpoint's keys) hold an OpenCLIP text tower (also under `text.`)."""
    return any(prefix + "token_embedding.weight" in tensors and prefix + "ln_final.weight" in tensors
               for prefix in ("", CUSTOM))


def _text_cfg(meta, path):
    model = (meta.get("open_clip_config") or {}).get("model_cfg", {})
    text = model.get("text_cfg", {}) if isinstance(model, dict) else None
    if not isinstance(text, dict):
        raise ValueError(f"{path}: open_clip_config.json's model_cfg / text_cfg is not a JSON object.")
    other = {k: text[k] for k, default in DEFAULTS.items() if text.get(k, default) not in (default, None)}
    if other:
        raise ValueError(f"{path}: an OpenCLIP text tower with {other}; keras_vit reads OpenCLIP's CLIP text "
                         "transformer (causal mask, end-of-text pooling, no LayerScale, bias-free projection).")
    return text, model


def read(folder, tensors, meta):
    """`(TextConfig, tensors under transformers' CLIPTextModelWithProjection names, logit_scale,
    logit_bias)` of an OpenCLIP checkpoint's `tensors` (its keys, `visual.*` left aside)."""
    text, model = _text_cfg(meta, folder)
    if CUSTOM + "token_embedding.weight" in tensors:
        tensors = {**{k[len(CUSTOM):]: v for k, v in tensors.items() if k.startswith(CUSTOM)},
                   **{k: tensors[k] for k in ("logit_scale", "logit_bias") if k in tensors}}
    missing = [key for key in ("positional_embedding", "text_projection") if key not in tensors]
    if missing:
        raise ValueError(f"{folder}: the OpenCLIP text tower lacks {', '.join(missing)}.")
    vocab, width = tensors["token_embedding.weight"].shape
    depth = sum(1 for key in tensors if key.startswith("transformer.resblocks.") and key.endswith(".ln_1.weight"))
    if text.get("layers", depth) != depth:
        raise ValueError(f"{folder}: its open_clip_config.json declares {text['layers']} text blocks but its tensors "
                         f"hold {depth}; expected a configuration that matches its weights.")
    heads = text.get("heads") or width // HEAD_WIDTH
    context = tensors["positional_embedding"].shape[0]
    tokenizer = tokenizer_from_folder(folder, "clip", context, vocab)
    config = TextConfig(
        family="clip", vocab_size=vocab, context=context, width=width, depth=depth, num_heads=heads,
        mlp_dim=tensors[BLOCK.format(i=0) + "mlp.c_fc.weight"].shape[0] if depth else 4 * width,
        quick_gelu=bool(model.get("quick_gelu", False)), approximate_gelu=False, layer_norm_epsilon=1e-5, causal=True,
        pooling="eos", eos_token_id=tokenizer.eos_id, projection_dim=tensors["text_projection"].shape[-1],
        projection_bias=False)
    out = {"embeddings.token_embedding.weight": tensors["token_embedding.weight"],
           "embeddings.position_embedding.weight": tensors["positional_embedding"],
           "final_layer_norm.weight": tensors["ln_final.weight"], "final_layer_norm.bias": tensors["ln_final.bias"],
           "text_projection.weight": tensors["text_projection"].transpose(1, 0)}
    for i in range(depth):
        theirs, ours = BLOCK.format(i=i), f"encoder.layers.{i}."
        for p in ("weight", "bias"):
            for part, name in enumerate("qkv"):
                out[ours + f"self_attn.{name}_proj.{p}"] = tensors[theirs + f"attn.in_proj_{p}"].rows(
                    part * width, (part + 1) * width)
            for mine, hf in RENAMES.items():
                out[ours + f"{hf}.{p}"] = tensors[theirs + f"{mine}.{p}"]
    return config, out, tensors.get("logit_scale"), tensors.get("logit_bias")
