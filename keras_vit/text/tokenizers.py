"""Each family's tokenizer, read from the checkpoint's own files with a maintained library
(`tokenizers`, `sentencepiece`), turning texts into the fixed-length id rows the text tower takes.

| family | files | text clean-up | sequence |
|---|---|---|---|
| CLIP | `tokenizer.json`, else `vocab.json` + `merges.txt` (byte-level BPE) | NFC, runs of white space to one space, lower case (the BPE's normaliser) | `<|startoftext|>`, at most `context - 2` tokens, `<|endoftext|>`, padded with the pad token (default `<|endoftext|>`) |
| SigLIP | `spiece.model` (SentencePiece) | lower case, punctuation removed, white space collapsed (transformers' `SiglipTokenizer.canonicalize_text`) | at most `context - 1` tokens, `</s>`, padded with the pad token (`</s>`) |
| SigLIP 2 | `tokenizer.json` (Gemma's) | the same clean-up (big_vision's `canonicalize_text` of its zero-shot prompts; transformers only lower-cases) | at most `context - 1` tokens, `<eos>` (no `<bos>`), padded with `<pad>` |
| "hf": OpenCLIP's `HFTokenizer` (SigLIP, SigLIP 2 on the hub's `timm/ViT-*-SigLIP*`) | `tokenizer.json`, else `spiece.model`; special tokens from `tokenizer_config.json` / `special_tokens_map.json` | the `open_clip_config.json`'s `tokenizer_kwargs.clean` (`CLEAN`: "open_clip_canonicalize", ...) | `bos_token` when `add_bos_token`, at most `context - 1` tokens, `eos_token`, padded with `pad_token` |

The context is the text tower's (77 for CLIP, 64 for SigLIP): every row has that length, the
end-of-text token kept when a text is cut (big_vision's "sticky" eos).
"""

import html
import json
import os
import re
import string
import unicodedata

import numpy as np

from keras_vit.utils.files import regular_file

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_CURLY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u201c": '"', "\u201d": '"',
                        "\u201e": '"', "\u201f": '"'})
# Each family's special tokens where tokenizer_config.json does not name them (transformers' defaults).
SPECIAL = {"clip": dict(bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"),
           "siglip": dict(eos_token="</s>", pad_token="</s>"),
           "siglip2": dict(eos_token="<eos>", pad_token="<pad>")}
# A tokenizer's files, as checkpoints ship them (`save` and the exports copy those present).
FILES = ("tokenizer.json", "spiece.model", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
CLIP_SPLIT = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def canonicalize(text, lower=True):
    """SigLIP's text clean-up: lower case (unless not `lower`), ASCII punctuation removed, white
    space collapsed and stripped."""
    return re.sub(r"\s+", " ", (text.lower() if lower else text).translate(_PUNCTUATION)).strip()


def _open_clip_basic(text):
    """OpenCLIP's `basic_clean` without ftfy's mojibake repair: NFC, curly quotes made straight
    (ftfy's defaults), HTML entities decoded twice, stripped."""
    return html.unescape(html.unescape(unicodedata.normalize("NFC", text).translate(_CURLY))).strip()


def _whitespace(text):
    return " ".join(text.split())


# Text clean-up rules by name: (function, what a serving card says of it). The "open_clip_*" rules
# are OpenCLIP's `tokenizer_kwargs.clean` choices of its `HFTokenizer`.
CLEAN = {
    "none": (lambda text: text, "none (the BPE's own normaliser)"),
    "siglip": (canonicalize, "lower case, ASCII punctuation removed, white space collapsed"),
    "siglip_cased": (lambda text: canonicalize(text, lower=False), "ASCII punctuation removed, white space collapsed"),
    "open_clip_canonicalize": (lambda text: canonicalize(_open_clip_basic(text).replace("_", " ")),
                               "HTML entities decoded, '_' to a space, lower case, ASCII punctuation removed, "
                               "white space collapsed (OpenCLIP's canonicalize)"),
    "open_clip_lower": (lambda text: _whitespace(_open_clip_basic(text)).lower(),
                        "HTML entities decoded, white space collapsed, lower case (OpenCLIP's lower)"),
    "open_clip_whitespace": (lambda text: _whitespace(_open_clip_basic(text)),
                             "HTML entities decoded, white space collapsed (OpenCLIP's whitespace)"),
    "open_clip_whitespace_underscore": (lambda text: _whitespace(_open_clip_basic(text).replace("_", " ")),
                                        "HTML entities decoded, '_' to a space, white space collapsed "
                                        "(OpenCLIP's whitespace_underscore)"),
}
DEFAULT_CLEAN = {"clip": "none", "siglip": "siglip", "siglip2": "siglip", "hf": "open_clip_whitespace"}


def check_texts(texts):
    """`texts` as a list of non-empty strings (one string is a list of one), or a one-line ValueError."""
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ValueError(f"texts={texts!r}: expected a non-empty list of strings.")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts: {text!r} is not a non-empty string; every text needs some characters.")
    return list(texts)


def check_labels(labels, template=None):
    """The texts of `labels` (each through `template`'s `{}` when given), or a one-line ValueError."""
    labels = check_texts(labels)
    if template is None:
        return labels
    if not isinstance(template, str) or "{}" not in template:
        raise ValueError(f"template={template!r} must be a string with {{}} where each label goes, "
                         "e.g. 'a photo of a {}.'.")
    return [template.replace("{}", label) for label in labels]


def _token(value):
    """A special token of tokenizer_config.json: a string or an AddedToken dict (its `content`)."""
    return value.get("content") if isinstance(value, dict) else value


def _file(folder, name):
    path = os.path.join(folder, name)
    return regular_file(path, "as a tokenizer file") if os.path.lexists(path) else None  # a loop: named


class Tokenizer:
    """`tokenizer(texts)` -> `(len(texts), context)` int32 ids. `family`, `context`, `vocab_size`,
    `folder` (of its files), `clean_rule` (a name of `CLEAN`) and the special ids (`bos_id` (None
    without one), `eos_id`, `pad_id`) as attributes; `encode(text)`: the ids of one cleaned text,
    without special tokens."""

    def __init__(self, folder, family, context, encode, vocab_size, token_id, special, clean):
        self.folder, self.family, self.context, self.vocab_size = folder, family, int(context), int(vocab_size)
        self._encode = encode
        self.clean_rule = clean
        self.clean = CLEAN[clean][0]
        self.bos_id = token_id(special["bos_token"]) if "bos_token" in special else None
        self.eos_id, self.pad_id = token_id(special["eos_token"]), token_id(special["pad_token"])
        if self.eos_id is None or self.pad_id is None:
            raise ValueError(f"the {family} tokenizer has no id for its end-of-text or pad token "
                             f"({special['eos_token']!r}, {special['pad_token']!r}).")

    def encode(self, text):
        return list(self._encode(self.clean(text)))

    def card(self, folder, files):
        """What a serving card says of this tokenizer, copied as `files` into `folder`."""
        sequence = ("bos_id, " if self.bos_id is not None else "") + "the text's ids (cut to fit), eos_id, pad_id up to context"
        return {"folder": folder, "files": list(files), "family": self.family, "context": self.context,
                "bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id, "sequence": sequence,
                "clean_up": CLEAN[self.clean_rule][1],
                "load": f"keras_vit.text.tokenizer_from_folder(folder, {self.family!r}, {self.context}, "
                        f"clean={self.clean_rule!r})(texts)"}

    def __call__(self, texts):
        texts = check_texts(texts)
        prefix = [] if self.bos_id is None else [self.bos_id]
        room = self.context - len(prefix) - 1
        rows = np.full((len(texts), self.context), self.pad_id, np.int32)
        for row, text in zip(rows, texts):
            ids = prefix + self.encode(text)[:room] + [self.eos_id]
            row[: len(ids)] = ids
        return rows


def _tokenizers_file(path):
    """A `tokenizers.Tokenizer` from `tokenizer.json` (its own truncation and padding off)."""
    from tokenizers import Tokenizer as Fast

    try:
        fast = Fast.from_file(path)
    except Exception as error:  # the Rust library's parse errors
        raise ValueError(f"{path}: not a readable tokenizers tokenizer.json ({str(error).splitlines()[0]}).") from None
    fast.no_truncation()
    fast.no_padding()
    return fast


def _clip_bpe(folder):
    """CLIP's byte-level BPE from `vocab.json` + `merges.txt`, with CLIP's normaliser and split."""
    from tokenizers import Regex, Tokenizer as Fast, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab, merges = _file(folder, "vocab.json"), _file(folder, "merges.txt")
    try:
        fast = Fast(BPE.from_file(vocab, merges, end_of_word_suffix="</w>", continuing_subword_prefix="",
                                  unk_token=SPECIAL["clip"]["eos_token"], fuse_unk=False))
    except Exception as error:
        raise ValueError(f"{folder}: vocab.json / merges.txt are not a readable BPE vocabulary "
                         f"({str(error).splitlines()[0]}).") from None
    fast.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                            normalizers.Lowercase()])
    fast.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return fast


def _sentencepiece(path):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.Load(path)
    except (OSError, RuntimeError) as error:
        raise ValueError(f"{path}: not a readable SentencePiece model ({error}).") from None
    return processor


def _settings(folder):
    """`special_tokens_map.json` updated with `tokenizer_config.json` ({} without them)."""
    settings = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if path := _file(folder, name):
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
            if not isinstance(loaded, dict):
                raise ValueError(f"{path}: expected a JSON object ({{...}}).")
            settings.update(loaded)
    return settings


def _hf_special(folder, settings):
    """The special tokens of an "hf" tokenizer: its `eos_token` and `pad_token` (both needed),
    its `bos_token` when `add_bos_token`."""
    special = {key: _token(settings.get(key)) for key in ("eos_token", "pad_token")}
    missing = [key for key, value in special.items() if not value]
    if missing:
        raise ValueError(f"{folder}: tokenizer_config.json names no {' / '.join(missing)}; the text tower's sequences "
                         "end with the end-of-text token and are padded with the pad token.")
    if settings.get("add_bos_token") and _token(settings.get("bos_token")):
        special["bos_token"] = _token(settings["bos_token"])
    return special


def _spiece_tokenizer(folder, family, context, path, special, clean):
    processor = _sentencepiece(path)

    def piece_id(token):  # SentencePiece gives unknown pieces the unk id
        found = processor.piece_to_id(token)
        return None if found == processor.unk_id() and token != processor.id_to_piece(found) else found

    return Tokenizer(folder, family, context, processor.encode, processor.get_piece_size(), piece_id, special, clean)


def tokenizer_from_folder(folder, family, context, vocab_size=None, clean=None):
    """The `Tokenizer` of `family` ("clip", "siglip", "siglip2", or "hf": the folder's Hugging Face
    tokenizer files as OpenCLIP's `HFTokenizer` reads them) from the files in `folder`, making rows
    of `context` ids; a SigLIP folder with Gemma's `tokenizer.json` and no `spiece.model` is
    SigLIP 2. `vocab_size`: the text tower's embedding rows, which the vocabulary must not exceed;
    `clean`: the text clean-up (a name of `CLEAN`; default the family's, `DEFAULT_CLEAN`)."""
    if family not in DEFAULT_CLEAN:
        raise ValueError(f"Unknown tokenizer family {family!r}; expected one of {tuple(DEFAULT_CLEAN)}.")
    if clean is not None and clean not in CLEAN:
        raise ValueError(f"Unknown text clean-up {clean!r}; expected one of {tuple(CLEAN)}.")
    settings = _settings(folder)
    spiece, fast_file = _file(folder, "spiece.model"), _file(folder, "tokenizer.json")
    if family == "siglip" and spiece is None and fast_file is not None:
        family = "siglip2"
    if family == "hf":
        special = _hf_special(folder, settings)
    else:
        special = {key: _token(settings.get(key)) or value for key, value in SPECIAL[family].items()}
    if clean is None:
        clean = "siglip_cased" if family == "siglip" and not settings.get("do_lower_case", True) else DEFAULT_CLEAN[family]
    if family == "siglip" or (family == "hf" and fast_file is None and spiece is not None):
        if spiece is None:
            raise ValueError(f"{folder}: no spiece.model, the SentencePiece vocabulary of a SigLIP text tower.")
        tokenizer = _spiece_tokenizer(folder, family, context, spiece, special, clean)
    else:
        if fast_file is None and family in ("siglip2", "hf"):
            raise ValueError(f"{folder}: no tokenizer.json (nor spiece.model), the vocabulary of this "
                             f"{'SigLIP 2' if family == 'siglip2' else 'Hugging Face'} text tower.")
        if fast_file is None and not (_file(folder, "vocab.json") and _file(folder, "merges.txt")):
            raise ValueError(f"{folder}: no tokenizer.json, nor vocab.json and merges.txt, for the CLIP tokenizer.")
        fast = _tokenizers_file(fast_file) if fast_file else _clip_bpe(folder)
        tokenizer = Tokenizer(folder, family, context, lambda text: fast.encode(text, add_special_tokens=False).ids,
                              fast.get_vocab_size(with_added_tokens=True), fast.token_to_id, special, clean)
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise ValueError(f"{folder}: the tokenizer's vocabulary of {tokenizer.vocab_size} tokens does not fit the text "
                         f"tower's embedding table of {vocab_size} rows (a tokenizer of another model?).")
    return tokenizer
