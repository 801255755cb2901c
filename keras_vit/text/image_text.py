"""`ImageTextModel`: an image tower and a text tower in one embedding space (CLIP, SigLIP,
SigLIP 2), with the family's zero-shot probabilities."""

import dataclasses
import json
import os
import shutil

import keras
import numpy as np

from keras_vit.applications.from_checkpoint import from_checkpoint
from keras_vit.utils.files import atomic_path
from keras_vit.inspect.model_parts import is_naflex
from keras_vit.data.naflex_inputs import naflex_inputs
from keras_vit.text import image_processing, names
from keras_vit.text.model import text_from_checkpoint
from keras_vit.text.tokenizers import FILES, check_labels, tokenizer_from_folder
from keras_vit.weights.containers import OPEN_CLIP_CONFIG, read_json

OPEN_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")

# The files `save` writes beside the two models; the tokenizer's are copied as they are.
SAVED = "image_text.json"
IMAGE_MODEL, TEXT_MODEL, PREPROCESSOR = "image_model.keras", "text_model.keras", "preprocessor_config.json"
BATCH = 32  # images or texts encoded at a time


def _rows(model, inputs, batch=BATCH):
    """`model` run on `inputs` (an array, or a NaFlex dict of arrays) `batch` rows at a time, as NumPy."""
    count = len(next(iter(inputs.values())) if isinstance(inputs, dict) else inputs)
    out = []
    for start in range(0, count, batch):
        part = ({k: v[start: start + batch] for k, v in inputs.items()} if isinstance(inputs, dict)
                else inputs[start: start + batch])
        out.append(keras.ops.convert_to_numpy(model.predict(part, batch_size=batch, verbose=0)))
    return np.concatenate(out).astype(np.float32)


def _unit(features):
    return features / np.linalg.norm(features, axis=-1, keepdims=True)


class ImageTextModel:
    """Both towers of an image-text checkpoint. `image_model` maps the preprocessed images to the
    image features (the family's `get_image_features`), `text_model` `(batch, context)` token ids to
    the text features (`get_text_features`); `tokenizer` (`keras_vit.text.tokenizers.Tokenizer`)
    and `processing` (`image_processing.ImageProcessing`) prepare their inputs. `family`: "clip"
    (softmax of the scaled cosines over the labels) or "siglip" / "siglip2" (a sigmoid per label of
    the scaled cosine plus `logit_bias`)."""

    def __init__(self, image_model, text_model, tokenizer, processing, family, logit_scale, logit_bias=None):
        self.image_model, self.text_model, self.tokenizer = image_model, text_model, tokenizer
        self.processing, self.family = processing, family
        self.logit_scale, self.logit_bias = float(logit_scale), None if logit_bias is None else float(logit_bias)

    @classmethod
    def from_checkpoint(cls, path, force_download=False):
        """Both towers of a transformers folder (`CLIPModel`, `SiglipModel`, `Siglip2Model`), an
        OpenCLIP folder or file (`open_clip_model.safetensors` / `open_clip_pytorch_model.bin`,
        `open_clip_config.json` and the tokenizer's files beside it), a folder `save` wrote, or a
        named checkpoint (`keras_vit.text.names.NAMES`: hub ids, e.g. "openai/clip-vit-base-patch16",
        "google/siglip2-base-patch16-224"; `force_download`: fetch its files again). The image tower is `keras_vit.from_checkpoint(path)`'s; a folder
        without a text tower is refused (use `keras_vit.from_checkpoint` for its image tower)."""
        path = os.fspath(path)
        if not os.path.exists(path) and path in names.NAMES:
            path = names.fetch(path, force_download)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such folder or file, nor a named image-text checkpoint "
                                    "(keras_vit.text.names.NAMES: hub ids such as openai/clip-vit-base-patch32, "
                                    "google/siglip2-base-patch16-224).")
        if os.path.isfile(path) and os.path.basename(path) in OPEN_CLIP_FILES:  # its folder holds the tokenizer
            path = os.path.dirname(os.path.abspath(path))
        if os.path.isfile(os.path.join(path, SAVED)):
            return cls._load(path)
        text_model, tokenizer, tower = text_from_checkpoint(path)
        if not tower.has_image_tower:
            raise ValueError(f"{path}: a text tower alone; ImageTextModel needs a folder with both towers "
                             "(CLIPModel, SiglipModel, Siglip2Model).")
        image_model = from_checkpoint(path)
        config_path, open_clip_path = os.path.join(path, PREPROCESSOR), os.path.join(path, OPEN_CLIP_CONFIG)
        if os.path.isfile(config_path):
            processing = image_processing.from_preprocessor_config(read_json(config_path), config_path)
        elif os.path.isfile(open_clip_path):
            processing = image_processing.from_open_clip_config(read_json(open_clip_path), open_clip_path)
        else:
            processing = image_processing.from_model(image_model)
        scale = 1.0 if tower.logit_scale is None else np.asarray(tower.logit_scale.load()).reshape(-1)[0]
        bias = None if tower.logit_bias is None else np.asarray(tower.logit_bias.load()).reshape(-1)[0]
        return cls(image_model, text_model, tokenizer, processing, tower.config.family, scale, bias)

    @classmethod
    def _load(cls, folder):
        saved = read_json(os.path.join(folder, SAVED))
        models = [keras.saving.load_model(os.path.join(folder, name)) for name in (IMAGE_MODEL, TEXT_MODEL)]
        tokenizer = tokenizer_from_folder(folder, saved["tokenizer_family"], saved["context"], clean=saved.get("clean"))
        processing = image_processing.ImageProcessing(**{
            k: tuple(v) if isinstance(v, list) else v for k, v in saved["processing"].items()})
        return cls(*models, tokenizer, processing, saved["family"], saved["logit_scale"], saved["logit_bias"])

    def save(self, folder):
        """Writes both Keras models (`image_model.keras`, `text_model.keras`), the tokenizer's files
        and `image_text.json` (family, logit scale and bias, image processing) to the new folder
        `folder`, which `ImageTextModel.from_checkpoint(folder)` reads back."""
        folder = os.fspath(folder)
        if os.path.lexists(folder):
            raise FileExistsError(f"{folder} exists; ImageTextModel.save writes a new folder.")
        with atomic_path(folder) as tmp:
            os.makedirs(tmp)
            self.image_model.save(os.path.join(tmp, IMAGE_MODEL))
            self.text_model.save(os.path.join(tmp, TEXT_MODEL))
            for name in FILES:
                if os.path.isfile(source := os.path.join(self.tokenizer.folder, name)):
                    shutil.copyfile(source, os.path.join(tmp, name))
            saved = dict(family=self.family, logit_scale=self.logit_scale, logit_bias=self.logit_bias,
                         tokenizer_family=self.tokenizer.family, context=self.tokenizer.context,
                         clean=self.tokenizer.clean_rule,
                         processing=self.processing.to_dict())
            with open(os.path.join(tmp, SAVED), "w", encoding="utf-8") as handle:
                json.dump(saved, handle, indent=1)

    def image_inputs(self, images):
        """The image tower's input for `images`: a list of file paths or `(H, W, 3)` 0-255 RGB
        arrays, or one `(B, H, W, 3)` array."""
        if isinstance(images, (str, os.PathLike)) or (isinstance(images, np.ndarray) and images.ndim == 3):
            images = [images]
        if len(images) == 0:
            raise ValueError("images: an empty list; expected image file paths or (height, width, 3) arrays.")
        pixels = [image_processing.load(image) for image in images]
        if is_naflex(self.image_model):
            return naflex_inputs(pixels, self.image_model, max_num_patches=self.processing.max_num_patches or 256)
        return np.stack([image_processing.normalise(self.processing, image_processing.resized(self.processing, p))
                         for p in pixels])

    def encode_image(self, images):
        """`(B, D)` image features (not normalised) of `images` (see `image_inputs`)."""
        return _rows(self.image_model, self.image_inputs(images))

    def encode_text(self, texts):
        """`(T, D)` text features (not normalised) of the strings `texts`."""
        return _rows(self.text_model, self.tokenizer(texts))

    def logits(self, images, texts):
        """`(B, T)` logits per image: the scaled cosines (plus SigLIP's bias), as `logits_per_image`."""
        cosine = _unit(self.encode_image(images).astype(np.float64)) @ _unit(self.encode_text(texts).astype(np.float64)).T
        return cosine * np.exp(self.logit_scale) + (self.logit_bias or 0.0)

    def classifier(self, labels, template=None):
        """The zero-shot classifier of the labels as an ordinary keras_vit Vision Transformer: the
        image tower's layers and weights, its features scaled to unit length (`unit_features`),
        then a `head` initialised from the labels' unit text features times `exp(logit_scale)`
        (bias `logit_bias`, else 0) and the family's softmax / sigmoid: `zero_shot`'s probabilities
        for prepared images (`image_inputs`). Saved as `.keras`, it is the start of a fine-tuning
        (`keras-vit train --weights CLASSIFIER.keras`)."""
        from keras_vit.applications.from_checkpoint import vit_of_checkpoint
        from keras_vit.weights.canonical import HEAD
        from keras_vit.weights.export import model_checkpoint
        from keras_vit.weights.lazy import LazyArray

        texts = _unit(self.encode_text(check_labels(labels, template)).astype(np.float64))
        head = {HEAD[0]: (texts.T * np.exp(self.logit_scale)).astype(np.float32),
                HEAD[1]: np.full(len(texts), self.logit_bias or 0.0, np.float32)}
        tower = model_checkpoint(self.image_model)
        ckpt = dataclasses.replace(tower, path="the zero-shot head", tensors={
            **tower.tensors, **{key: LazyArray.wrap(value, "the zero-shot head") for key, value in head.items()}}
        ).with_options(unit_features=True)
        shape = None if is_naflex(self.image_model) else tuple(self.image_model.inputs[0].shape[1:])
        return vit_of_checkpoint(ckpt, input_shape=shape, name="zero_shot_classifier",
                                 classifier_activation="softmax" if self.family == "clip" else "sigmoid")

    def zero_shot(self, images, labels, template=None):
        """`(B, T)` probabilities of each label (through `template`, e.g. "a photo of a {}.") for each
        image: CLIP's softmax over the labels, SigLIP's independent sigmoid per label."""
        logits = self.logits(images, check_labels(labels, template))
        if self.family == "clip":
            logits = logits - logits.max(axis=-1, keepdims=True)
            return (np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)).astype(np.float32)
        return (1 / (1 + np.exp(-logits))).astype(np.float32)
