"""Tiny transformers dense models (Depth Anything, DPT on a DINOv2 backbone) with O(1) random
weights, written as `save_pretrained` folders, and their `predicted_depth` for NHWC images; DINOv2's
linear segmentation head files (mmseg `BNHead` state dicts) with random weights."""

import numpy as np

PATCH, WIDTH, DEPTH, HEADS = 8, 32, 4, 2
NECK = dict(neck_hidden_sizes=[8, 16, 24, 32], fusion_hidden_size=16)


def _backbone(transformers, out_indices=(1, 2, 3, 4)):
    return transformers.Dinov2Config(
        hidden_size=WIDTH, num_hidden_layers=max(DEPTH, *out_indices), num_attention_heads=HEADS, intermediate_size=2 * WIDTH,
        patch_size=PATCH, image_size=32, out_indices=list(out_indices), reshape_hidden_states=False)


def depth_anything(transformers, metric=False, out_indices=(1, 2, 3, 4), **overrides):
    """A `DepthAnythingForDepthEstimation` (relative, or metric with max_depth 20)."""
    kind = dict(depth_estimation_type="metric", max_depth=20) if metric else {}
    config = transformers.DepthAnythingConfig(
        backbone_config=_backbone(transformers, out_indices), patch_size=PATCH, reassemble_hidden_size=WIDTH,
        head_hidden_size=8, **NECK, **kind, **overrides)
    return transformers.DepthAnythingForDepthEstimation(config)


def dpt(transformers, readout="project", batch_norm=False, out_indices=(1, 2, 3, 4), **overrides):
    """A `DPTForDepthEstimation` on a DINOv2 backbone."""
    config = transformers.DPTConfig(
        backbone_config=_backbone(transformers, out_indices), is_hybrid=False, readout_type=readout,
        use_batch_norm_in_fusion_residual=batch_norm, **NECK, **overrides)
    return transformers.DPTForDepthEstimation(config)


def randomize_dense(model, seed=0):
    """O(1) weights and BatchNorm statistics; the depth output's last bias positive, so that its
    ReLU passes most pixels."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.ndim >= 2:
                p.copy_(noise * p[0].numel() ** -0.5)
            elif "norm" in name and name.endswith("weight") or name.endswith("lambda1"):
                p.copy_(0.6 + 0.2 * noise)
            else:
                p.copy_(0.3 * noise)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=generator))
            elif name.endswith("running_mean"):
                b.copy_(0.3 * torch.randn(b.shape, generator=generator))
        last = model.head.head[4] if hasattr(model.head, "head") else model.head.conv3
        last.bias.fill_(1.0)
    return model.eval()


def predicted_depth(model, images):
    """transformers' `predicted_depth` for NHWC float32 `images`."""
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))).predicted_depth.numpy()


def head_state(in_channels, classes, seed=0):
    """The tensors of an mmseg `BNHead` (`decode_head.*`, DINOv2's linear segmentation head), random."""
    import torch

    rng = np.random.default_rng(seed)
    arrays = {
        "conv_seg.weight": 0.3 * rng.standard_normal((classes, in_channels, 1, 1)),
        "conv_seg.bias": 0.1 * rng.standard_normal(classes),
        "bn.weight": 1 + 0.2 * rng.standard_normal(in_channels),
        "bn.bias": 0.2 * rng.standard_normal(in_channels),
        "bn.running_mean": 0.5 * rng.standard_normal(in_channels),
        "bn.running_var": rng.uniform(0.5, 2.0, in_channels),
    }
    state = {f"decode_head.{k}": torch.tensor(v, dtype=torch.float32) for k, v in arrays.items()}
    state["decode_head.bn.num_batches_tracked"] = torch.tensor(40000)
    return state


def write_head(path, state):
    """A head file as DINOv2 publishes it: mmseg's `{"state_dict": ..., "meta": ...}`."""
    import torch

    meta = {"mmseg_version": "0.27.0", "CLASSES": tuple(f"c{i}" for i in range(len(state["decode_head.conv_seg.bias"]))),
            "iter": 40000}
    torch.save({"state_dict": state, "meta": meta}, path)
    return str(path)
