"""A text tower's architecture and rules as data, read from a transformers `config.json`.

Plain Python, no Keras. Each family's text model (transformers `CLIPTextModel[WithProjection]`,
`SiglipTextModel`, `Siglip2TextModel`) is a pre-norm transformer over token + learned position
embeddings with a final LayerNorm; they differ in the mask, the MLP's GELU, where the sequence is
pooled and the projection after it:

| family | mask | MLP | pooled at | projection |
|---|---|---|---|---|
| CLIP | causal | `hidden_act` (QuickGELU by default) | the first `eos_token_id` (argmax of the ids for the legacy `eos_token_id == 2` configs) | `text_projection`, no bias |
| SigLIP, SigLIP 2 | none (the padding is part of the input) | tanh GELU | the last token | `head`, with bias |
"""

import dataclasses
from typing import Optional

FAMILIES = ("clip", "siglip", "siglip2")
POOLINGS = ("eos", "argmax", "last")
# transformers' `hidden_act` -> (TransformerBlock's `quick_gelu`, `approximate_gelu`)
ACTIVATIONS = {"quick_gelu": (True, False), "gelu": (False, False), "gelu_new": (False, True),
               "gelu_pytorch_tanh": (False, True)}
# The defaults of each family's transformers text config where `config.json` leaves them out.
DEFAULTS = {
    "clip": dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                 num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                 eos_token_id=49407, projection_dim=512),
    "siglip": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh",
                   layer_norm_eps=1e-6),
}
DEFAULTS["siglip2"] = DEFAULTS["siglip"]


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """`context`: the token sequence the model takes (its position embeddings); `pooling`: "eos"
    (the first `eos_token_id`), "argmax" (of the ids: OpenAI CLIP's end-of-text has the largest id)
    or "last"; `projection_dim` / `projection_bias`: the Dense after the pooling."""

    family: str
    vocab_size: int
    context: int
    width: int
    depth: int
    num_heads: int
    mlp_dim: int
    quick_gelu: bool
    approximate_gelu: bool
    layer_norm_epsilon: float
    causal: bool
    pooling: str
    projection_dim: int
    projection_bias: bool
    eos_token_id: Optional[int] = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Unknown text family {self.family!r}; expected one of {FAMILIES}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"Unknown text pooling {self.pooling!r}; expected one of {POOLINGS}.")
        for name in ("vocab_size", "context", "width", "depth", "num_heads", "mlp_dim", "projection_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"text config {name}={value!r} must be a whole number >= 1.")
        if self.width % self.num_heads:
            raise ValueError(f"text config: width {self.width} is not divisible by num_heads={self.num_heads}.")


def text_config(family, text, projection_dim=None, path="config.json", legacy_argmax=True):
    """The `TextConfig` of a transformers text config dict `text` (a pair's `text_config`, or a
    text model's whole config) of `family`; `projection_dim`: CLIP's (from the pair's config);
    `legacy_argmax`: CLIP's argmax pooling for `eos_token_id == 2` (False: MetaCLIP 2, whose
    XLM-V end-of-text is id 2)."""
    if not isinstance(text, dict):
        raise ValueError(f"{path}: its text_config is a {type(text).__name__}; expected a JSON object ({{...}}).")
    settings = {**DEFAULTS[family], **{k: v for k, v in text.items() if v is not None}}
    act = settings["hidden_act"]
    if act not in ACTIVATIONS:
        raise ValueError(f"{path}: text hidden_act={act!r} is not supported; expected one of {tuple(ACTIVATIONS)}.")
    quick, approximate = ACTIVATIONS[act]
    width = settings["hidden_size"]
    common = dict(family=family, vocab_size=settings["vocab_size"], context=settings["max_position_embeddings"],
                  width=width, depth=settings["num_hidden_layers"], num_heads=settings["num_attention_heads"],
                  mlp_dim=settings["intermediate_size"], quick_gelu=quick, approximate_gelu=approximate,
                  layer_norm_epsilon=float(settings["layer_norm_eps"]))
    if family == "clip":
        eos = settings["eos_token_id"]
        return TextConfig(**common, causal=True, pooling="argmax" if eos == 2 and legacy_argmax else "eos", eos_token_id=eos,
                          projection_dim=projection_dim or settings.get("projection_dim", width),
                          projection_bias=False)
    return TextConfig(**common, causal=False, pooling="last", projection_dim=settings.get("projection_size") or width,
                      projection_bias=True)
