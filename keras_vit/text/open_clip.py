"""OpenCLIP's text tower (`open_clip.transformer.TextTransformer`): the keys of
`open_clip_model.safetensors` / `open_clip_pytorch_model.bin` beside the image tower (`visual.*`),
at the top (OpenCLIP's `CLIP`) or under `text.` (its `CustomTextCLIP`: EVA-CLIP, the SigLIP and
SigLIP 2 models, `custom_text: true`), renamed to transformers' text-model names so that
`reading.keras_weights` assigns them.

Keys: `token_embedding.weight` `(vocab, width)`, `positional_embedding` `(context, width)`,
`transformer.resblocks.{i}.` `ln_1`, `attn.in_proj_weight` / `in_proj_bias` (q, k, v rows),
`attn.out_proj`, `ln_2`, `mlp.c_fc`, `mlp.c_proj`, `ln_final`, and the projection: `text_projection`
`(width, dim)` used as `x @ text_projection`, or with `proj_bias` the Linear `text_projection.weight`
/ `.bias`; `logit_scale` and SigLIP's `logit_bias` (then the zero-shot probabilities are sigmoids).

The architecture comes from the shapes, the rest from `open_clip_config.json`'s `model_cfg`:
`text_cfg.heads` (else width / 64, as every named CLIP), `no_causal_mask`, `pool_type` ("argmax":
the largest id, which is CLIP's end-of-text: pooled at the tokenizer's end-of-text; "eos" at
`eos_id`; "last"), `proj_bias`, `norm_kwargs.eps` (default 1e-5), `act_kwargs.approximate`
("tanh": SigLIP 2's GELU) and `quick_gelu`. The tokenizer: CLIP's BPE files, or with
`hf_tokenizer_name` the folder's Hugging Face tokenizer files (OpenCLIP's `HFTokenizer`, the hub
copies hold them) with `tokenizer_kwargs.clean`. Other text designs (a Hugging Face text model,
a class token, LayerScale, `text_arch="modern"`, ...) are refused in one line."""

from keras_vit.text.config import TextConfig
from keras_vit.text.tokenizers import tokenizer_from_folder

BLOCK = "transformer.resblocks.{i}."
HEAD_WIDTH, EPSILON = 64, 1e-5  # OpenCLIP's LayerNorm default
PREFIXES = ("", "text.")  # CLIP's text keys, CustomTextCLIP's
# text_cfg settings of OpenCLIP's `CLIPTextCfg` this reader takes only at their default
DEFAULTS = {"hf_model_name": None, "embed_cls": False, "ls_init_value": None, "final_ln_after_pool": False,
            "proj_type": "linear", "text_arch": "clip", "block_type": None, "qk_norm": False,
            "scaled_cosine_attn": False, "scale_heads": False, "scale_attn_inner": False, "scale_attn": False,
            "scale_fc": False, "tokenizer_mode": None, "tokenizer_type": ""}
POOLINGS = {"argmax": "eos", "eos": "eos", "last": "last"}  # OpenCLIP's pool_type -> TextPooling's
GELUS = ("none", "tanh")  # act_kwargs.approximate: exact or tanh GELU
CLEANS = ("canonicalize", "lower", "whitespace", "whitespace_underscore")  # HFTokenizer's `clean` choices
RENAMES = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "attn.out_proj": "self_attn.out_proj", "mlp.c_fc": "mlp.fc1",
           "mlp.c_proj": "mlp.fc2"}


def text_prefix(tensors):
    """The prefix of the OpenCLIP text tower's keys in `tensors` ("" or "text."), None without one."""
    return next((p for p in PREFIXES if p + "token_embedding.weight" in tensors and p + "ln_final.weight" in tensors),
                None)


def is_open_clip(tensors):
    """Whether `tensors` (a checkpoint's keys) hold an OpenCLIP text tower."""
    return text_prefix(tensors) is not None


def _text_cfg(meta, path):
    model = (meta.get("open_clip_config") or {}).get("model_cfg", {})
    text = model.get("text_cfg", {}) if isinstance(model, dict) else None
    if not isinstance(text, dict):
        raise ValueError(f"{path}: open_clip_config.json's model_cfg / text_cfg is not a JSON object.")
    other = {k: text[k] for k, default in DEFAULTS.items() if text.get(k, default) not in (default, None)}
    if text.get("block_type") == "default":
        other.pop("block_type")
    norm, act = text.get("norm_kwargs") or {}, text.get("act_kwargs") or {}
    kwargs = text.get("tokenizer_kwargs") or {}
    if text.get("pool_type", "argmax") not in POOLINGS:
        other["pool_type"] = text["pool_type"]
    if not isinstance(norm, dict) or set(norm) - {"eps"}:
        other["norm_kwargs"] = norm
    if not isinstance(act, dict) or set(act) - {"approximate"} or act.get("approximate", "none") not in GELUS:
        other["act_kwargs"] = act
    if not isinstance(kwargs, dict) or set(kwargs) - {"clean", "strip_sep_token"} or kwargs.get("strip_sep_token") \
            or kwargs.get("clean", "whitespace") not in CLEANS:
        other["tokenizer_kwargs"] = kwargs
    if text.get("pool_type") == "eos" and not isinstance(text.get("eos_id"), int):
        other["eos_id"] = text.get("eos_id")
    if other:
        raise ValueError(f"{path}: an OpenCLIP text tower with {other}; keras_vit reads OpenCLIP's text transformer "
                         "(pool_type argmax / eos / last, no class token, no LayerScale, norm_kwargs eps, act_kwargs "
                         "approximate, tokenizer_kwargs clean).")
    return text, model


def _tokenizer(folder, text, context, vocab):
    if text.get("hf_tokenizer_name"):
        clean = (text.get("tokenizer_kwargs") or {}).get("clean", "whitespace")
        return tokenizer_from_folder(folder, "hf", context, vocab, clean=f"open_clip_{clean}")
    return tokenizer_from_folder(folder, "clip", context, vocab)


def read(folder, tensors, meta):
    """`(TextConfig, tensors under transformers' text-model names, logit_scale, logit_bias,
    tokenizer)` of an OpenCLIP checkpoint's `tensors` (its keys, `visual.*` left aside). With a
    `logit_bias` the family is "siglip" (sigmoid probabilities), else "clip"."""
    text, model = _text_cfg(meta, folder)
    prefix = text_prefix(tensors)
    scale, logit_bias = tensors.get("logit_scale"), tensors.get("logit_bias")
    if prefix:
        tensors = {key[len(prefix):]: value for key, value in tensors.items() if key.startswith(prefix)}
    bias = text.get("proj_bias", False)
    projection = "text_projection.weight" if bias else "text_projection"
    missing = [key for key in ("positional_embedding", projection) if key not in tensors]
    if missing:
        raise ValueError(f"{folder}: the OpenCLIP text tower lacks {', '.join(prefix + m for m in missing)}.")
    vocab, width = tensors["token_embedding.weight"].shape
    depth = sum(1 for key in tensors if key.startswith("transformer.resblocks.") and key.endswith(".ln_1.weight"))
    if text.get("layers", depth) != depth:
        raise ValueError(f"{folder}: its open_clip_config.json declares {text['layers']} text blocks but its tensors "
                         f"hold {depth}; expected a configuration that matches its weights.")
    heads = text.get("heads") or width // HEAD_WIDTH
    context = tensors["positional_embedding"].shape[0]
    tokenizer = _tokenizer(folder, text, context, vocab)
    family = "clip" if logit_bias is None else "siglip"
    pool = text.get("pool_type", "argmax")
    config = TextConfig(
        family=family, vocab_size=vocab, context=context, width=width, depth=depth, num_heads=heads,
        mlp_dim=tensors[BLOCK.format(i=0) + "mlp.c_fc.weight"].shape[0] if depth else 4 * width,
        quick_gelu=bool(model.get("quick_gelu", False)),
        approximate_gelu=(text.get("act_kwargs") or {}).get("approximate") == "tanh",
        layer_norm_epsilon=float((text.get("norm_kwargs") or {}).get("eps", EPSILON)),
        causal=not text.get("no_causal_mask"),
        pooling=POOLINGS[pool], eos_token_id=text["eos_id"] if pool == "eos" else tokenizer.eos_id,
        projection_dim=tensors[projection].shape[0 if bias else -1], projection_bias=bool(bias))
    head = "text_projection" if family == "clip" else "head"
    out = {"embeddings.token_embedding.weight": tensors["token_embedding.weight"],
           "embeddings.position_embedding.weight": tensors["positional_embedding"],
           "final_layer_norm.weight": tensors["ln_final.weight"], "final_layer_norm.bias": tensors["ln_final.bias"],
           f"{head}.weight": tensors[projection] if bias else tensors[projection].transpose(1, 0)}
    if bias:
        out[f"{head}.bias"] = tensors["text_projection.bias"]
    for i in range(depth):
        theirs, ours = BLOCK.format(i=i), f"encoder.layers.{i}."
        for p in ("weight", "bias"):
            for part, name in enumerate("qkv"):
                out[ours + f"self_attn.{name}_proj.{p}"] = tensors[theirs + f"attn.in_proj_{p}"].rows(
                    part * width, (part + 1) * width)
            for mine, hf in RENAMES.items():
                out[ours + f"{hf}.{p}"] = tensors[theirs + f"{mine}.{p}"]
    return config, out, scale, logit_bias, tokenizer
