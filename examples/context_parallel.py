"""Context and tensor parallelism with posenc, on the CPU (gloo).

    torchrun --standalone --nproc_per_node 2 examples/context_parallel.py

Each rank encodes only its own tokens (zigzag context parallelism, as used with ring
attention) and then only its own channels (tensor parallelism). The shards are all-gathered
and compared with the full encoding: they fit together bit for bit.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import posenc
from posenc.torch import PositionalEncoding


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seq, dim = 4096, 256
    full = PositionalEncoding(dim, cached_length=seq)(torch.zeros(1, seq, dim))[0]

    # context parallelism: this rank's zigzag chunks of the sequence
    positions = torch.from_numpy(
        posenc.context_parallel_positions(seq, rank, world, layout="zigzag")
    )
    local = PositionalEncoding(dim)(torch.zeros(1, len(positions), dim), positions)[0]
    shards = [torch.empty_like(local) for _ in range(world)]
    where = [torch.empty_like(positions) for _ in range(world)]
    dist.all_gather(shards, local)
    dist.all_gather(where, positions)
    glued = torch.empty_like(full)
    for p, s in zip(where, shards, strict=True):
        glued[p] = s
    context_ok = torch.equal(glued, full)

    # tensor parallelism: this rank's channel range
    channels = posenc.tensor_parallel_channels(dim, rank, world)
    width = channels.stop - channels.start
    local = PositionalEncoding(dim, channels=channels)(torch.zeros(1, seq, width))[0]
    shards = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(shards, local)
    tensor_ok = torch.equal(torch.cat(shards, dim=1), full)

    if rank == 0:
        print(f"{world} ranks, sequence {seq}, dim {dim}")
        print(f"  zigzag context shards == full encoding: {context_ok}")
        print(f"  tensor-parallel channel shards == full encoding: {tensor_ok}")
    dist.destroy_process_group()
    if not (context_ok and tensor_ok):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
