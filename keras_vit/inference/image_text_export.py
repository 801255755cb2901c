"""The serving exports of an image-text model's towers (`keras_vit.text.ImageTextModel`), each
through `serving.export`: the text tower with its tokenizer's files beside it, the image tower
with the checkpoint's own image processing in its card."""

from keras_vit.inference.serving import export
from keras_vit.inspect.model_parts import is_naflex

TOWERS = ("image", "text")


def _steps(processing):
    resize = (f"resize to {processing.size}" if processing.size else
              f"resize the shorter side to {processing.shortest_edge}, take the central {processing.crop} square")
    return ["decode to RGB (height, width, 3)", resize, "x = (pixels * rescale - mean) / std, float32",
            "stack as (batch, height, width, 3)"]


def export_tower(model, tower, fmt, output, **options):
    """Exports `tower` ("image" or "text") of the `ImageTextModel` `model` as `fmt` to `output`
    (`options`: `serving.export`'s keywords); returns the largest difference `verify` found. The
    text tower takes `(batch, context)` token ids, its tokenizer's files copied to
    `OUTPUT.tokenizer/`; the image tower the images as `model.image_inputs` prepares them. Each
    card (`OUTPUT.serving.json`) says so."""
    if tower not in TOWERS:
        raise ValueError(f"tower={tower!r}; expected one of {TOWERS}.")
    if tower == "text":
        return export(model.text_model, fmt, output, tokenizer=model.tokenizer, **options)
    fields = {"output": {"shape": [None, *model.image_model.output_shape[1:]], "holds": "image features (not normalised)"}}
    if not is_naflex(model.image_model):
        fields["preprocessing"] = {"name": "image_text", **model.processing.to_dict(), "steps": _steps(model.processing)}
    return export(model.image_model, fmt, output, card_fields=fields, **options)
