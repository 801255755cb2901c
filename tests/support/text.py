"""Tiny image-text checkpoints written offline: transformers `SiglipModel`, `Siglip2Model`,
`CLIPModel`, `CLIPTextModelWithProjection` with random weights (`save_pretrained`), and each
family's own tokenizer files trained here on a few sentences (`tokenizers`' BPE trainer,
`sentencepiece`'s trainer), so that transformers' tokenizer classes load them too."""

import json
import os

import numpy as np

from tests.support.checkpoints import randomize_family_model

SENTENCES = ["a photo of a cat", "a photo of a dog", "a picture of two dogs playing", "an image of a red car",
             "the quick brown fox jumps over the lazy dog", "a drawing of a bird flying", "photos of cats and dogs",
             "a bad photo of a big truck", "a close up photo of a small plane"] * 3
IMAGE = 32  # image side; patches of 8
TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
VISION = dict(TOWER, image_size=IMAGE, patch_size=8)
CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def write_clip_tokenizer(folder):
    """CLIP's byte-level BPE (`vocab.json`, `merges.txt`) trained on `SENTENCES`; its size."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE

    bpe = Tokenizer(BPE(end_of_word_suffix="</w>", continuing_subword_prefix="", unk_token="<|endoftext|>"))
    bpe.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    bpe.train_from_iterator(SENTENCES, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|startoftext|>", "<|endoftext|>"], end_of_word_suffix="</w>",
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    os.makedirs(folder, exist_ok=True)
    bpe.model.save(folder)
    return bpe.get_vocab_size()


def write_spiece(folder):
    """SigLIP's SentencePiece `spiece.model` (ids: pad 0, `</s>` 1, unk 2) and its transformers
    tokenizer config; its size."""
    import sentencepiece
    import transformers

    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, "spiece")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_prefix=prefix, vocab_size=80, hard_vocab_limit=False, pad_id=0,
        eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    os.remove(prefix + ".vocab")
    transformers.SiglipTokenizer(prefix + ".model").save_pretrained(folder)
    return sentencepiece.SentencePieceProcessor(model_file=prefix + ".model").get_piece_size()


def write_gemma_tokenizer(folder):
    """A Gemma-style `tokenizer.json` (BPE over "▁"-joined words, byte fallback; `<pad>` 0,
    `<eos>` 1, `<bos>` 2, `<unk>` 3, appending `<eos>`) as the SigLIP 2 checkpoints ship it; its size."""
    from tokenizers import Tokenizer, decoders, normalizers, processors, trainers
    from tokenizers.models import BPE

    bpe = Tokenizer(BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    bpe.normalizer = normalizers.Replace(" ", "▁")
    bpe.train_from_iterator([s.replace(" ", "▁") for s in SENTENCES], trainers.BpeTrainer(
        vocab_size=100, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"], show_progress=False))
    bpe.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", 1)])
    bpe.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    os.makedirs(folder, exist_ok=True)
    bpe.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as handle:
        json.dump({"tokenizer_class": "GemmaTokenizer", "add_bos_token": False, "add_eos_token": True,
                   "pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>",
                   "padding_side": "right", "model_max_length": 64}, handle)
    return bpe.get_vocab_size()


def siglip_folder(folder, tokenizer="spiece", seed=0):
    """A random `SiglipModel` folder with SigLIP's `spiece.model` ("spiece") or SigLIP 2's Gemma
    `tokenizer.json` ("gemma"), and a `SiglipImageProcessor` config; the torch model."""
    import transformers

    vocab = (write_spiece if tokenizer == "spiece" else write_gemma_tokenizer)(folder)
    config = transformers.SiglipConfig(text_config=dict(TOWER, vocab_size=vocab + 3, max_position_embeddings=64),
                                       vision_config=VISION)
    model = randomize_family_model(transformers.SiglipModel(config), seed)
    model.save_pretrained(folder)
    transformers.SiglipImageProcessor(size={"height": IMAGE, "width": IMAGE}).save_pretrained(folder)
    return model


def clip_folder(folder, text_only=False, seed=0, kind="CLIP", eos_token_id=1, hidden_act="quick_gelu", context=77):
    """A random `CLIPModel` (or `CLIPTextModelWithProjection`) folder with CLIP's BPE files and a
    `CLIPImageProcessor` config (shortest edge, centre crop); the torch model. `kind="MetaClip2"`:
    a `MetaClip2Model` (CLIP's architecture, pooled at `eos_token_id` whatever its value);
    `hidden_act`, `context`: the text tower's activation and context length."""
    import transformers

    vocab = write_clip_tokenizer(folder)
    text = dict(TOWER, vocab_size=vocab, max_position_embeddings=context, bos_token_id=0, eos_token_id=eos_token_id,
                pad_token_id=1, projection_dim=24, hidden_act=hidden_act)
    if text_only:
        model = getattr(transformers, f"{kind}TextModelWithProjection")(getattr(transformers, f"{kind}TextConfig")(**text))
    else:
        config = getattr(transformers, f"{kind}Config")(text_config=text, vision_config=VISION, projection_dim=24)
        model = getattr(transformers, f"{kind}Model")(config)
        transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}
                                        ).save_pretrained(folder)
    model = randomize_family_model(model, seed)
    model.save_pretrained(folder)
    return model


def siglip2_folder(folder, seed=0):
    """A random NaFlex `Siglip2Model` folder with Gemma's `tokenizer.json` and a
    `Siglip2ImageProcessor` config (a budget of 16 patches of 8 pixels); the torch model."""
    import transformers

    vocab = write_gemma_tokenizer(folder)
    vision = {k: v for k, v in VISION.items() if k != "image_size"}
    config = transformers.Siglip2Config(text_config=dict(TOWER, vocab_size=vocab, max_position_embeddings=64),
                                        vision_config=dict(vision, num_patches=16))
    model = randomize_family_model(transformers.Siglip2Model(config), seed)
    model.save_pretrained(folder)
    transformers.Siglip2ImageProcessor(patch_size=8, max_num_patches=16).save_pretrained(folder)
    return model


def open_clip_keys(sd, depth):
    """transformers' CLIP image tower as OpenCLIP's `visual.*` state dict (open_clip `transformer.py`)."""
    v = "vision_model."
    out = {
        "visual.conv1.weight": sd[v + "embeddings.patch_embedding.weight"],
        "visual.class_embedding": sd[v + "embeddings.class_embedding"],
        "visual.positional_embedding": sd[v + "embeddings.position_embedding.weight"],
        "visual.ln_pre.weight": sd[v + "pre_layrnorm.weight"], "visual.ln_pre.bias": sd[v + "pre_layrnorm.bias"],
        "visual.ln_post.weight": sd[v + "post_layernorm.weight"], "visual.ln_post.bias": sd[v + "post_layernorm.bias"],
        "visual.proj": sd["visual_projection.weight"].T.copy(),
    }
    out.update(_open_clip_blocks(sd, v, "visual.", depth))
    return out


def _open_clip_blocks(sd, theirs_prefix, ours_prefix, depth):
    """transformers' encoder layers as OpenCLIP's `transformer.resblocks.{i}.` (q, k, v fused in `in_proj`)."""
    out = {}
    for i in range(depth):
        theirs, ours = f"{theirs_prefix}encoder.layers.{i}.", f"{ours_prefix}transformer.resblocks.{i}."
        for p in ("weight", "bias"):
            out[ours + f"attn.in_proj_{p}"] = np.concatenate([sd[theirs + f"self_attn.{n}_proj.{p}"] for n in "qkv"])
            for mine, hf in (("attn.out_proj", "self_attn.out_proj"), ("ln_1", "layer_norm1"), ("ln_2", "layer_norm2"),
                             ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2")):
                out[ours + f"{mine}.{p}"] = sd[theirs + f"{hf}.{p}"]
    return out


def open_clip_state(model):
    """A transformers `CLIPModel`'s weights as one OpenCLIP `CLIP` state dict (NumPy): `visual.*`,
    the text tower (`token_embedding`, `positional_embedding`, `transformer.*`, `ln_final`,
    `text_projection` used as `x @ text_projection`) and `logit_scale`."""
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    out = open_clip_keys(sd, model.config.vision_config.num_hidden_layers)
    out.update(open_clip_text_keys(sd, model.config.text_config.num_hidden_layers))
    out["logit_scale"] = sd["logit_scale"]
    return out


def open_clip_text_keys(sd, depth, prefix=""):
    """transformers' CLIP text tower (`sd`: NumPy, `text_model.*` and `text_projection`) as OpenCLIP's
    text keys under `prefix` ("text." in its `CustomTextCLIP`)."""
    t = "text_model."
    out = {prefix + k: v for k, v in _open_clip_blocks(sd, t, "", depth).items()}
    out.update({prefix + "token_embedding.weight": sd[t + "embeddings.token_embedding.weight"],
                prefix + "positional_embedding": sd[t + "embeddings.position_embedding.weight"],
                prefix + "ln_final.weight": sd[t + "final_layer_norm.weight"],
                prefix + "ln_final.bias": sd[t + "final_layer_norm.bias"],
                prefix + "text_projection": sd["text_projection.weight"].T.copy()})
    return out


# OpenCLIP's `CustomTextCLIP` models with timm image towers: timm's model name, pooling, text context, mean / std.
TIMM_TOWERS = {"eva": ("eva02_base_patch16_clip_224", "token", 77, [0.48145466, 0.4578275, 0.40821073],
                       [0.26862954, 0.26130258, 0.27577711]),
               "pe": ("vit_pe_core_base_patch16_224", "map", 32, [0.5] * 3, [0.5] * 3)}


def timm_clip_folder(folder, rng, tower="eva", kind="safetensors", heads=2):
    """An OpenCLIP `EVA02-*` (`tower="eva"`) or `PE-Core-*` ("pe") hub folder (`CustomTextCLIP`): a random
    timm image tower (`timm_rope_vit.eva02_state_dict(clip=True)` / `pe_state_dict`, patches of 8 on a 4 x 4
    grid, projected to 24) under `visual.trunk.`, a random transformers `CLIPTextModelWithProjection` (GELU)
    rewritten under `text.`, `logit_scale`, `open_clip_config.json` (its `timm_model_kwargs` giving the
    head count) and CLIP's tokenizer files. Returns `(text model, the image tower's timm state dict,
    logit_scale)`."""
    import torch

    from keras_vit.weights.containers import write_safetensors
    from tests.support.timm_rope_vit import eva02_state_dict, pe_state_dict

    name, pool, context, mean, std = TIMM_TOWERS[tower]
    text_model = clip_folder(folder, text_only=True, hidden_act="gelu", context=context)
    for file in ("config.json", "model.safetensors"):
        os.remove(os.path.join(folder, file))
    trunk = (eva02_state_dict(rng, width=32, depth=2, heads=heads, hidden=48, patch=8, grid=IMAGE // 8, classes=24,
                              clip=True) if tower == "eva"
             else pe_state_dict(rng, width=32, depth=2, mlp=64, patch=8, grid=IMAGE // 8, projection=24))
    scale = np.asarray(np.log(1 / 0.07), np.float32)
    state = {**{"visual.trunk." + k: v for k, v in trunk.items()}, "logit_scale": scale,
             **open_clip_text_keys({k: v.numpy() for k, v in text_model.state_dict().items()},
                                   text_model.config.num_hidden_layers, "text.")}
    if kind == "safetensors":
        write_safetensors(os.path.join(folder, "open_clip_model.safetensors"), state)
    else:
        torch.save({k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in state.items()},
                   os.path.join(folder, "open_clip_pytorch_model.bin"))
    text = text_model.config
    config = {"model_cfg": {"embed_dim": 24, "custom_text": True,
                            "vision_cfg": {"image_size": IMAGE, "timm_model_name": name, "timm_model_pretrained": False,
                                           "timm_pool": pool, "timm_proj": None, "timm_model_kwargs": {"num_heads": heads}},
                            "text_cfg": {"context_length": context, "vocab_size": text.vocab_size,
                                         "width": text.hidden_size, "heads": text.num_attention_heads,
                                         "layers": text.num_hidden_layers}},
              "preprocess_cfg": {"mean": mean, "std": std}}
    with open(os.path.join(folder, "open_clip_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return text_model, trunk, float(scale)


def open_clip_folder(folder, kind="safetensors", seed=0):
    """A random transformers `CLIPModel` (`clip_folder`) rewritten as an OpenCLIP hub folder: its
    weights as `open_clip_model.safetensors` ("safetensors") or `open_clip_pytorch_model.bin`
    ("bin"), `open_clip_config.json`, CLIP's tokenizer files; no transformers config or weights.
    Returns the transformers model."""
    import torch

    from keras_vit.weights.containers import write_safetensors

    model = clip_folder(folder, seed=seed)
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        os.remove(os.path.join(folder, name))
    state = open_clip_state(model)
    if kind == "safetensors":
        write_safetensors(os.path.join(folder, "open_clip_model.safetensors"), state)
    else:
        torch.save({k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in state.items()},
                   os.path.join(folder, "open_clip_pytorch_model.bin"))
    text, vision = model.config.text_config, model.config.vision_config
    config = {"model_cfg": {"embed_dim": model.config.projection_dim, "quick_gelu": True,
                            "vision_cfg": {"image_size": IMAGE, "patch_size": 8, "width": vision.hidden_size,
                                           "layers": vision.num_hidden_layers,
                                           "head_width": vision.hidden_size // vision.num_attention_heads},
                            "text_cfg": {"context_length": 77, "vocab_size": text.vocab_size, "width": text.hidden_size,
                                         "heads": text.num_attention_heads, "layers": text.num_hidden_layers}},
              "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]}}
    with open(os.path.join(folder, "open_clip_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return model


def write_t5_tokenizer(folder):
    """SigLIP's vocabulary as the hub's OpenCLIP copies ship it (`T5Tokenizer` files): the
    `write_spiece` pieces as a Unigram `tokenizer.json` appending `</s>`, padded with `</s>`; its size."""
    import sentencepiece
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    write_spiece(folder)
    spiece = os.path.join(folder, "spiece.model")
    pieces = sentencepiece.SentencePieceProcessor(model_file=spiece)
    fast = Tokenizer(models.Unigram([(pieces.id_to_piece(i), pieces.get_score(i)) for i in range(pieces.get_piece_size())],
                                    unk_id=2))
    fast.normalizer = normalizers.NFKC()
    fast.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                  pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    fast.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    fast.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as handle:
        json.dump({"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>",
                   "extra_ids": 0, "legacy": False}, handle)
    return fast.get_vocab_size()


def _timm_siglip_trunk(sd, depth, width):
    """transformers' SigLIP image tower as a timm `vit_*_siglip_*` state dict (MAP head `attn_pool`)."""
    v = "vision_model."
    in_w, in_b = sd[v + "head.attention.in_proj_weight"], sd[v + "head.attention.in_proj_bias"]
    out = {"patch_embed.proj.weight": sd[v + "embeddings.patch_embedding.weight"],
           "patch_embed.proj.bias": sd[v + "embeddings.patch_embedding.bias"],
           "pos_embed": sd[v + "embeddings.position_embedding.weight"][None],
           "norm.weight": sd[v + "post_layernorm.weight"], "norm.bias": sd[v + "post_layernorm.bias"],
           "attn_pool.latent": sd[v + "head.probe"], "attn_pool.q.weight": in_w[:width], "attn_pool.q.bias": in_b[:width],
           "attn_pool.kv.weight": in_w[width:], "attn_pool.kv.bias": in_b[width:],
           "attn_pool.proj.weight": sd[v + "head.attention.out_proj.weight"],
           "attn_pool.proj.bias": sd[v + "head.attention.out_proj.bias"],
           "attn_pool.norm.weight": sd[v + "head.layernorm.weight"], "attn_pool.norm.bias": sd[v + "head.layernorm.bias"]}
    out.update({f"attn_pool.mlp.{n}.{p}": sd[v + f"head.mlp.{n}.{p}"] for n in ("fc1", "fc2") for p in ("weight", "bias")})
    for i in range(depth):
        theirs, ours = f"{v}encoder.layers.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            out[ours + f"attn.qkv.{p}"] = np.concatenate([sd[theirs + f"self_attn.{n}_proj.{p}"] for n in "qkv"])
            for mine, hf in (("norm1", "layer_norm1"), ("norm2", "layer_norm2"), ("attn.proj", "self_attn.out_proj"),
                             ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
                out[ours + f"{mine}.{p}"] = sd[theirs + f"{hf}.{p}"]
    return out


def open_clip_siglip_folder(folder, tokenizer="t5", kind="safetensors", seed=0, context=16):
    """A random transformers `SiglipModel` rewritten as an OpenCLIP `CustomTextCLIP` hub folder
    (`timm/ViT-B-16-SigLIP`'s layout): `visual.trunk.*` (timm's SigLIP tower, exact GELU), `text.*`
    (no causal mask, last-token pooling, projection with bias), `logit_scale`, `logit_bias`,
    `open_clip_config.json` and the Hugging Face tokenizer files: SigLIP's T5 ("t5", exact GELU in
    the text tower, as OpenCLIP's config) or SigLIP 2's Gemma ("gemma", tanh GELU). Returns the
    transformers model, the same math."""
    import torch
    import transformers

    from keras_vit.weights.containers import write_safetensors

    vocab = (write_t5_tokenizer if tokenizer == "t5" else write_gemma_tokenizer)(folder)
    text_act = "gelu" if tokenizer == "t5" else "gelu_pytorch_tanh"
    config = transformers.SiglipConfig(
        text_config=dict(TOWER, vocab_size=vocab, max_position_embeddings=context, hidden_act=text_act),
        vision_config=dict(VISION, hidden_act="gelu"))
    model = randomize_family_model(transformers.SiglipModel(config), seed)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    depth, width = TOWER["num_hidden_layers"], TOWER["hidden_size"]
    state = {"visual.trunk." + k: v for k, v in _timm_siglip_trunk(sd, depth, width).items()}
    t = "text_model."
    text = {"token_embedding.weight": sd[t + "embeddings.token_embedding.weight"],
            "positional_embedding": sd[t + "embeddings.position_embedding.weight"],
            "ln_final.weight": sd[t + "final_layer_norm.weight"], "ln_final.bias": sd[t + "final_layer_norm.bias"],
            "text_projection.weight": sd[t + "head.weight"], "text_projection.bias": sd[t + "head.bias"],
            **_open_clip_blocks(sd, t, "", depth)}
    state.update({"text." + k: v for k, v in text.items()})
    state.update(logit_scale=sd["logit_scale"], logit_bias=sd["logit_bias"])
    if kind == "safetensors":
        write_safetensors(os.path.join(folder, "open_clip_model.safetensors"), state)
    else:
        torch.save({k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in state.items()},
                   os.path.join(folder, "open_clip_pytorch_model.bin"))
    text_cfg = {"context_length": context, "vocab_size": vocab, "hf_tokenizer_name": "timm/ViT-B-16-SigLIP",
                "tokenizer_kwargs": {"clean": "canonicalize"}, "width": width, "heads": TOWER["num_attention_heads"],
                "layers": depth, "no_causal_mask": True, "proj_bias": True, "pool_type": "last",
                "norm_kwargs": {"eps": 1e-6}, **({"act_kwargs": {"approximate": "tanh"}} if tokenizer == "gemma" else {})}
    vision_cfg = {"image_size": IMAGE, "timm_model_name": "vit_base_patch16_siglip_224", "timm_model_pretrained": False,
                  "timm_pool": "map", "timm_proj": "none",
                  "timm_model_kwargs": {"embed_dim": width, "depth": depth, "num_heads": TOWER["num_attention_heads"],
                                        "patch_size": VISION["patch_size"], "mlp_ratio": 2.0}}
    config = {"model_cfg": {"embed_dim": width, "init_logit_bias": -10, "custom_text": True, "vision_cfg": vision_cfg,
                            "text_cfg": text_cfg},
              "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bicubic",
                                 "resize_mode": "squash", "size": IMAGE}}
    with open(os.path.join(folder, "open_clip_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return model


def write_xlmv_tokenizer(folder):
    """MetaCLIP 2's XLM-V tokenizer as its checkpoints ship it: a Unigram `tokenizer.json` (XLM-R
    layout: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3; `<s> text </s>`) and an `XLMRobertaTokenizer`
    `tokenizer_config.json`, over SentencePiece pieces trained on `SENTENCES`; its size."""
    import sentencepiece
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, "xlmv")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES), model_prefix=prefix, vocab_size=80, hard_vocab_limit=False, bos_id=0,
        pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    pieces = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
    vocab = [(pieces.id_to_piece(i), pieces.get_score(i)) for i in range(pieces.get_piece_size())] + [("<mask>", 0.0)]
    for suffix in (".model", ".vocab"):
        os.remove(prefix + suffix)
    fast = Tokenizer(models.Unigram(vocab, unk_id=3))
    fast.normalizer = normalizers.NFKC()
    fast.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    fast.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    fast.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as handle:
        json.dump({"tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                   "cls_token": "<s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
                   "model_max_length": 77}, handle)
    return fast.get_vocab_size()


def metaclip2_folder(folder, seed=0):
    """A random `MetaClip2Model` folder with the XLM-V tokenizer files (`write_xlmv_tokenizer`;
    end-of-text id 2, where the text tower pools) and a `CLIPImageProcessor` config; the torch model."""
    import transformers

    vocab = write_xlmv_tokenizer(folder)
    text = dict(TOWER, vocab_size=vocab, max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1,
                projection_dim=24)
    config = transformers.MetaClip2Config(text_config=text, vision_config=VISION, projection_dim=24)
    model = randomize_family_model(transformers.MetaClip2Model(config), seed)
    model.save_pretrained(folder)
    transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}
                                    ).save_pretrained(folder)
    return model
