"""Relative difference of keras_vit from each family's own library when a checkpoint runs at
another resolution than its own (issue 30's table), now and with the single bilinear resize
keras_vit used before (`interpolation="bilinear"`).

    KERAS_BACKEND=torch python benchmarks/resize_agreement.py

Random-weight models written by transformers itself (float32, 2 blocks of width 64, its own
initialisation at `initializer_range=0.2`): `Dinov2Model` (518 px, patch 14) run at 518 / 224 / 448 and
`ViTModel` (224 px, patch 16, `interpolate_pos_encoding=True`) at 224 / 384 / 160, read by
`keras_vit.from_checkpoint` from their folders. timm is not installed: its row is a timm
`vit_*_reg4_dinov2` file (`no_embed_class`, written by keras_vit's timm export) of
`Dinov2WithRegistersModel` weights, whose reference is timm's `resample_abs_pos_embed`
(`timm_resample`, written out in torch) run by transformers' layers. Difference: ||keras_vit - reference|| / ||reference|| over all output
tokens of 2 images.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import keras_vit  # noqa: E402

ARCH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, initializer_range=0.2)
F = torch.nn.functional


def timm_resample(posemb, new_size, num_prefix_tokens):
    """timm's `resample_abs_pos_embed`, as it reads: prefix rows kept, the square patch grid
    interpolated in float32 by bicubic `F.interpolate` with `antialias=True`."""
    posemb = torch.as_tensor(np.asarray(posemb))
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    side = int(grid.shape[1] ** 0.5)
    grid = grid.reshape(1, side, side, -1).permute(0, 3, 1, 2).float()
    grid = F.interpolate(grid, size=new_size, mode="bicubic", antialias=True)
    return torch.cat([prefix, grid.permute(0, 2, 3, 1).reshape(1, -1, grid.shape[1])], dim=1).numpy()


def _relative(ours, reference):
    return float(np.linalg.norm(ours - reference) / np.linalg.norm(reference))


def _images(size):
    return np.random.default_rng(0).uniform(-1, 1, (2, size, size, 3)).astype(np.float32)


def _torch_run(model, x, **kwargs):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **kwargs).last_hidden_state.numpy()


def _ours(folder, size, interpolation=None, **kwargs):
    model = keras_vit.from_checkpoint(folder, include_top=False, pooling=None, input_shape=(size, size, 3),
                                      interpolation=interpolation, **kwargs)
    return keras.ops.convert_to_numpy(model(_images(size)))


def hf_row(name, model, folder, sizes, **forward):
    cells = []
    for size in sizes:
        reference = _torch_run(model, _images(size), **forward)
        cells.append((size, _relative(_ours(folder, size), reference),
                      _relative(_ours(folder, size, "bilinear"), reference)))
    return name, cells


def timm_row(folder, tmp):
    source = transformers.Dinov2WithRegistersModel.from_pretrained(folder).eval()
    path = os.path.join(tmp, "reg4.safetensors")
    keras_vit.weights.export(keras_vit.from_checkpoint(folder), path, format="timm")
    patch_rows = source.embeddings.position_embeddings.detach()[:, 1:]  # the file's `pos_embed`
    cells = []
    for size in (518, 518 * 3 // 2 // 14 * 14, 2 * 518):
        grid = (size // 14, size // 14)
        state = source.state_dict()
        state["embeddings.position_embeddings"] = torch.cat(
            [state["embeddings.position_embeddings"][:, :1], torch.from_numpy(timm_resample(patch_rows, grid, 0))],
            dim=1)
        config = transformers.Dinov2WithRegistersConfig(**{**source.config.to_dict(), "image_size": size})
        reference = transformers.Dinov2WithRegistersModel(config).eval()
        reference.load_state_dict(state)
        reference = _torch_run(reference, _images(size))
        heads = dict(num_heads=ARCH["num_attention_heads"])
        cells.append((size, _relative(_ours(path, size, **heads), reference),
                      _relative(_ours(path, size, "bilinear", **heads), reference)))
    return "timm vit_*_reg4_dinov2 file (518 px), timm's resample in torch", cells


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        dinov2 = transformers.Dinov2Model(transformers.Dinov2Config(**ARCH, image_size=518, patch_size=14)).eval()
        dinov2.save_pretrained(os.path.join(tmp, "dinov2"))
        rows.append(hf_row("transformers Dinov2Model folder (518 px)", dinov2, os.path.join(tmp, "dinov2"),
                           (518, 224, 448)))
        vit = transformers.ViTModel(transformers.ViTConfig(**ARCH, image_size=224, patch_size=16),
                                    add_pooling_layer=False).eval()
        vit.save_pretrained(os.path.join(tmp, "vit"))
        rows.append(hf_row("transformers ViTModel folder (224 px)", vit, os.path.join(tmp, "vit"), (224, 384, 160),
                           interpolate_pos_encoding=True))
        reg = transformers.Dinov2WithRegistersModel(
            transformers.Dinov2WithRegistersConfig(**ARCH, image_size=518, patch_size=14, num_register_tokens=4)).eval()
        reg.save_pretrained(os.path.join(tmp, "reg"))
        rows.append(timm_row(os.path.join(tmp, "reg"), tmp))
    print(f"backend {keras.backend.backend()}; relative difference now (before: interpolation='bilinear')")
    print("| checkpoint | run at | now | before |")
    print("|---|---|---|---|")
    for name, cells in rows:
        print(f"| {name} | {' / '.join(str(s) for s, _, _ in cells)} | {' / '.join(f'{n:.1e}' for _, n, _ in cells)} "
              f"| {' / '.join(f'{b:.1e}' for _, _, b in cells)} |")


if __name__ == "__main__":
    main()
