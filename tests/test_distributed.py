"""Sharded encodings on a real torch.distributed process group (gloo, 2 and 4 processes).

Each rank computes only its shard (context-parallel positions, contiguous or zigzag, packed
sequences, offsets; tensor-parallel channel ranges); the shards are all-gathered and must equal
the full table bit for bit. Default DDP over the modules broadcasts no encoding bytes.
"""

from __future__ import annotations

import gc
import itertools
import os
import socket
import traceback

import numpy as np
import pytest

import posenc
import posenc.torch

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")
from posenc.torch import PositionalEncoding, packed_positions  # noqa: E402


def _gather(t):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return parts


def _check_context(rank: int, world: int) -> None:
    for preset, dim in [("vaswani", 64), ("whisper", 48), ("fairseq", 33)]:
        for layout in ("contiguous", "zigzag"):
            for offset in (0, 4093):
                seq = 8 * world * 13
                pos = posenc.context_parallel_positions(
                    seq, rank, world, layout=layout, offset=offset
                )
                shard = posenc.encode(torch.from_numpy(pos), dim, preset=preset)
                full = posenc.table(seq, dim, preset=preset, offset=offset, dtype=torch.float32)
                glued = torch.empty_like(full)
                for p, s in zip(_gather(torch.from_numpy(pos)), _gather(shard), strict=True):
                    glued[p - offset] = s
                assert torch.equal(glued, full), (preset, layout, offset)
                assert torch.equal(shard, full[torch.from_numpy(pos) - offset])


def _check_packed(rank: int, world: int) -> None:
    cu = torch.tensor([0, 4 * world, 10 * world, 12 * world, 20 * world])
    flat = packed_positions(cu)
    full = posenc.encode(flat, 64)  # every token's encoding on one device
    for layout in ("contiguous", "zigzag"):
        pos = posenc.context_parallel_positions(None, rank, world, layout=layout, cu_seqlens=cu)
        shard = posenc.encode(pos, 64)
        # where the shard's tokens sit in the packed stream
        index = torch.from_numpy(_token_index(cu.numpy(), rank, world, layout))
        assert torch.equal(pos, flat[index])
        glued = torch.empty_like(full)
        for i, s in zip(_gather(index), _gather(shard), strict=True):
            glued[i] = s
        assert torch.equal(glued, full), layout


def _token_index(cu: np.ndarray, rank: int, world: int, layout: str) -> np.ndarray:
    total = int(cu[-1])
    if layout == "contiguous":
        size = total // world
        return np.arange(rank * size, (rank + 1) * size)
    out = []
    for start, end in itertools.pairwise(cu):
        chunk = (end - start) // (2 * world)
        out += [
            np.arange(start + rank * chunk, start + (rank + 1) * chunk),
            np.arange(start + (2 * world - 1 - rank) * chunk, start + (2 * world - rank) * chunk),
        ]
    return np.concatenate(out)


def _check_channels(rank: int, world: int) -> None:
    for preset, shape, dim in [
        ("mae", (6, 7), 128),
        ("diffusers-3d", (2, 3, 4), 64),
        ("timm-2d", (5, 5), 64),
    ]:
        part = posenc.tensor_parallel_channels(dim, rank, world)
        shard = posenc.grid(shape, dim, preset=preset, device="cpu", channels=part)
        glued = torch.cat(_gather(shard), dim=1)
        assert torch.equal(glued, posenc.grid(shape, dim, preset=preset, device="cpu")), preset
    part = posenc.tensor_parallel_channels(256, rank, world)
    shard = posenc.table(3000, 256, preset="whisper", offset=17, dtype=torch.float32, channels=part)
    full = posenc.table(3000, 256, preset="whisper", offset=17, dtype=torch.float32)
    assert torch.equal(torch.cat(_gather(shard), dim=1), full)
    # the module accepts the same channel range
    module = PositionalEncoding(256, preset="whisper", channels=part)
    y = module(torch.zeros(2, 3000, 256 // world), offset=17)
    assert torch.equal(torch.cat(_gather(y[0]), dim=1), full)


def _check_ddp_broadcasts_nothing(rank: int, world: int) -> None:
    """Default DDP (broadcast_buffers=True) over modules that hold encodings: they have no
    buffers, so no step broadcasts any encoding bytes."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.ModuleDict(
        {
            "pe": PositionalEncoding(32, cached_length=2048),
            "grid": posenc.torch.GridEncoding(32, preset="mae"),
            "proj": torch.nn.Linear(32, 32),
        }
    )

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m["proj"](self.m["pe"](x)).sum() + self.m["grid"](x[:, :16], (4, 4)).sum()

    ddp = DistributedDataParallel(Net())
    assert list(ddp.buffers()) == []
    assert not ddp.will_sync_module_buffers()
    sent = []
    real = dist._broadcast_coalesced

    def counting(group, tensors, *args):
        sent.append(sum(t.numel() * t.element_size() for t in tensors))
        return real(group, tensors, *args)

    dist._broadcast_coalesced = counting
    try:
        for step in range(3):
            x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(rank + 10 * step))
            ddp(x).backward()
    finally:
        dist._broadcast_coalesced = real
    assert sum(sent) == 0, sent
    grads = ddp.module.m["proj"].weight.grad  # all-reduced: the same on every rank
    assert torch.equal(torch.cat(_gather(grads[None])[:1] * world), torch.cat(_gather(grads[None])))
    # the counter sees a module that does keep a buffer (the old cache was one)
    control = torch.nn.Linear(4, 4)
    control.register_buffer("pe", torch.zeros(2048, 32))
    dist._broadcast_coalesced = counting
    try:
        checked = DistributedDataParallel(control)
        checked(torch.randn(1, 4)).sum().backward()
    finally:
        dist._broadcast_coalesced = real
    assert sum(sent) >= 2048 * 32 * 4, sent
    del ddp, checked  # the reducers' threads end before the process group does
    gc.collect()
    dist.barrier()


def _worker(rank: int, world: int, port: int, errors: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        _check_context(rank, world)
        _check_packed(rank, world)
        _check_channels(rank, world)
        _check_ddp_broadcasts_nothing(rank, world)
    except Exception:
        with open(f"{errors}.{rank}", "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("world", [2, 4])
def test_shards_all_gather_to_the_full_table(world, tmp_path):
    errors = str(tmp_path / "error")
    try:
        mp.spawn(_worker, args=(world, _free_port(), errors), nprocs=world, join=True)
    except Exception as err:  # report the rank's own traceback
        reports = sorted(tmp_path.glob("error.*"))
        detail = "\n".join(p.read_text() for p in reports) or str(err)
        pytest.fail(f"a rank failed:\n{detail}")


def test_sharding_helpers():
    assert posenc.context_parallel_positions(8, 1, 2).tolist() == [4, 5, 6, 7]
    assert posenc.context_parallel_positions(8, 1, 2, layout="zigzag").tolist() == [2, 3, 4, 5]
    assert posenc.context_parallel_positions(8, 0, 2, offset=10).tolist() == [10, 11, 12, 13]
    got = posenc.context_parallel_positions(None, 1, 2, layout="zigzag", cu_seqlens=[0, 4, 12])
    assert got.tolist() == [1, 2, 2, 3, 4, 5]
    assert posenc.tensor_parallel_channels(1024, 3, 4) == slice(768, 1024)
    with pytest.raises(posenc.PosencError, match="divisible by 2 \\* world_size = 4"):
        posenc.context_parallel_positions(6, 0, 2, layout="zigzag")
    with pytest.raises(posenc.PosencError, match="`rank` must be < world_size = 2"):
        posenc.context_parallel_positions(8, 2, 2)
    with pytest.raises(posenc.PosencError, match="`dim` must be divisible by world_size = 3"):
        posenc.tensor_parallel_channels(1024, 0, 3)
    with pytest.raises(posenc.PosencError, match="`layout` must be"):
        posenc.context_parallel_positions(8, 0, 2, layout="ring")
    with pytest.raises(posenc.PosencError, match="`channels` must satisfy"):
        posenc.table(4, 8, channels=slice(4, 9))
    with pytest.raises(posenc.PosencError, match="step 1"):
        posenc.table(4, 8, channels=slice(0, 8, 2))


def test_torchrun_example_runs():
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "examples/context_parallel.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "zigzag context shards == full encoding: True" in proc.stdout
    assert "tensor-parallel channel shards == full encoding: True" in proc.stdout
