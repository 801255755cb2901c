"""Data-parallel `model.fit` on the PyTorch backend with `torch.distributed`.

Keras' PyTorch trainer runs one process on one device. Launched by `torchrun` (one
process per GPU, or several on CPU with gloo), each process here:

- joins the process group (NCCL on GPUs, gloo on CPUs) from torchrun's environment;
- starts from rank 0's weights (a broadcast of every model variable);
- reads only its part of every global batch (`part = (world_size, rank)`): together the
  ranks train on the batches one process would for the same seed;
- averages the gradients of all processes before every optimizer step (one all-reduce of
  the flattened gradients, wrapped around `optimizer.apply`), so all replicas make the same
  update and stay identical;
- reports the metrics of all processes: the loss / accuracy in the logs (progress line,
  `log.csv`, best-model choice, NaN stop) come from the metric states summed over processes.

Only rank 0 writes checkpoints and logs.
"""

import os

import torch
import torch.distributed as dist


def environment():
    """`(world_size, rank, local_rank)` from torchrun's environment (1, 0, 0 if absent)."""
    return (
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def launched():
    """True when this process was started by torchrun (or similar) with WORLD_SIZE > 1."""
    return environment()[0] > 1


def init_process_group():
    """Joins the default process group (idempotent); returns `(world_size, rank)`."""
    world_size, rank, local_rank = environment()
    if world_size < 2:
        raise ValueError(
            "strategy='torch_ddp' needs several processes: launch with "
            "`torchrun --nproc_per_node=N $(which keras-vit) train ...` (WORLD_SIZE is unset or 1)."
        )
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
    return dist.get_world_size(), dist.get_rank()


def broadcast_variables(variables, source=0):
    """Overwrites `variables` (Keras variables) with rank `source`'s values, in place."""
    with torch.no_grad():
        for variable in variables:
            dist.broadcast(variable.value.data, src=source)


def all_reduce_mean(tensors):
    """Mean over processes of a list of tensors, with one collective on their concatenation."""
    present = [t for t in tensors if t is not None]
    if not present:
        return tensors
    flat = torch.cat([t.reshape(-1).to(torch.float32) for t in present])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    out, offset = [], 0
    for tensor in tensors:
        if tensor is None:
            out.append(None)
            continue
        out.append(flat[offset : offset + tensor.numel()].view_as(tensor).to(tensor.dtype))
        offset += tensor.numel()
    return out


def all_reduce_sum(tensors):
    """Sum over processes of a list of tensors (one collective), as new tensors."""
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    return [part.view_as(t).to(t.dtype) for part, t in zip(flat.split([t.numel() for t in tensors]), tensors)]


def all_gather_rows(values):
    """`values` (a list of ints) of every process, rank by rank (one collective)."""
    row = torch.tensor(values, dtype=torch.int64)
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, row)
    return [r.tolist() for r in rows]


def global_metrics(model):
    """Makes `model`'s metric results (what `fit` logs) those of all processes: each is
    computed from its metric's state summed over processes (totals and counts), the local
    state kept as it was."""
    if getattr(model, "_keras_vit_global_metrics", False):
        return model
    local_results = model.get_metrics_result

    def get_metrics_result():
        states = [v.value.data for metric in model.metrics for v in metric.variables]
        if not states:
            return local_results()
        kept = [s.clone() for s in states]
        for state, total in zip(states, all_reduce_sum(states)):
            state.copy_(total)
        try:
            return {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in local_results().items()}
        finally:
            for state, value in zip(states, kept):
                state.copy_(value)

    model.get_metrics_result = get_metrics_result
    model._keras_vit_global_metrics = True
    return model


def average_gradients(optimizer):
    """Makes `optimizer.apply(grads, variables)` average `grads` over processes first."""
    if getattr(optimizer, "_keras_vit_ddp", False):
        return optimizer
    apply = optimizer.apply

    def apply_averaged(grads, trainable_variables=None):
        return apply(all_reduce_mean(list(grads)), trainable_variables)

    optimizer.apply = apply_averaged
    optimizer._keras_vit_ddp = True
    return optimizer


def prepare(model):
    """Rank 0's weights everywhere, gradient averaging and global metrics for a compiled model."""
    broadcast_variables(model.variables)
    average_gradients(model.optimizer)
    global_metrics(model)

