"""Relative logit error of keras_vit's precisions against a float64 NumPy reference.

    KERAS_BACKEND=torch python benchmarks/bf16_error.py                  # ViT-B/16, 224 px, 4 images
    KERAS_BACKEND=jax python benchmarks/bf16_error.py --torch-autocast   # also transformers under autocast

The same random weights (Glorot-initialised encoder, N(0, 0.02) embeddings, N(0, 1/width)
head; seeded) and images go through keras_vit under "float32" and "mixed_bfloat16" and, with
`--torch-autocast`, through Hugging Face transformers under `torch.autocast(bfloat16)` on the
same weights (exported with `keras_vit.weights.export(format="hf")`). Error: ||logits -
reference|| / ||reference|| over the batch, the reference being numpy_vit.py in float64.
"""

import argparse
import os
import sys
import tempfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.variants import variant  # noqa: E402
from numpy_vit import reference_params, vit_forward  # noqa: E402
from workload import weights_like_a_trained_vit  # noqa: E402


def relative_error(got, want):
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


def build(name, size, policy, weights=None):
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    model = getattr(keras_vit, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None,
                                     approximate_gelu=False)
    if weights is None:
        weights_like_a_trained_vit(model)
    else:
        model.set_weights(weights)
    return model


def torch_autocast_logits(model, images, arch):
    import torch
    from transformers import ViTForImageClassification

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as folder:
        keras_vit.weights.export(model, os.path.join(folder, "hf"), format="hf")
        hf = ViTForImageClassification.from_pretrained(os.path.join(folder, "hf"), attn_implementation="sdpa")
    hf = hf.eval().to(device)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().to(device)
    with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
        return hf(pixel_values=pixels).logits.float().cpu().numpy()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTB16")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--torch-autocast", action="store_true", help="also transformers under torch.autocast")
    args = parser.parse_args(argv)
    arch = variant(args.variant)
    images = np.random.default_rng(1).uniform(-1, 1, (args.images, args.resolution, args.resolution, 3)).astype("float32")
    model = build(args.variant, args.resolution, "float32")
    weights = model.get_weights()
    want, _ = vit_forward(images, reference_params(model, arch["num_heads"]), arch["patch_size"], arch["num_heads"], approximate_gelu=False)
    print(f"{args.variant}, {args.resolution} px, {args.images} images, KERAS_BACKEND={keras.backend.backend()}: "
          "relative logit error against float64")
    print(f"  keras_vit float32:        {relative_error(model.predict(images, verbose=0), want):.2e}")
    bf16 = build(args.variant, args.resolution, "mixed_bfloat16", weights)
    print(f"  keras_vit mixed_bfloat16: {relative_error(bf16.predict(images, verbose=0), want):.2e}")
    keras.config.set_dtype_policy("float32")
    if args.torch_autocast:
        print(f"  transformers autocast bf16: {relative_error(torch_autocast_logits(model, images, arch), want):.2e}")


if __name__ == "__main__":
    main()
