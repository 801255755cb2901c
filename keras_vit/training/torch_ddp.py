"""Data-parallel `model.fit` on the PyTorch backend with `torch.distributed`.

Keras' PyTorch trainer runs one process on one device. Launched by `torchrun` (one
process per GPU, or several on CPU with gloo), each process here:

- joins the process group (NCCL on GPUs, gloo on CPUs) from torchrun's environment;
- starts from rank 0's weights (a broadcast of every model variable);
- reads its own shard of the training data (`shard = (world_size, rank)`);
- averages the gradients of all processes before every optimizer step (one all-reduce of
  the flattened gradients, wrapped around `optimizer.apply`), so all replicas make the same
  update and stay identical.

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
    """Rank 0's weights everywhere and gradient averaging for a compiled model."""
    broadcast_variables(model.variables)
    average_gradients(model.optimizer)


def barrier():
    if dist.is_initialized():
        dist.barrier()
