"""Diffusion modules: the timestep embedding."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from posenc import evaluate
from posenc.api import sinusoidal
from posenc.errors import check_choice, check_int
from posenc.evaluate.libs import as_positions
from posenc.spec.layout import channel_plan
from posenc.spec.presets.sinusoidal import TIMESTEP
from posenc.torch._base import _Module, _traceable


class Timesteps(_Module):
    """The diffusion timestep embedding (diffusers ``Timesteps`` / ``get_timestep_embedding``).

    Args:
        dim: channels (``num_channels``).
        flip_sin_to_cos: ``[cos | sin]`` (Stable Diffusion, DiT).
        downscale_freq_shift: ``s`` in ``max_period ** (-k / (n - s))`` (1; 0 for SD).
        scale: multiplies the timesteps.
        max_period: largest period (10000).
        compat: ``"original"``: diffusers' own float32 arithmetic (``get_timestep_embedding``,
            bit for bit on CPU), as ``posenc.encode(..., preset="timestep",
            compat="original")``; default exact.

    Shapes:
        - timesteps: ``[n]`` (any shape ``[*]``), integer or real.
        - output: ``[*, dim]`` in the module's dtype (float32 unless moved).

    Examples:
        >>> emb = Timesteps(320, flip_sin_to_cos=True, downscale_freq_shift=0)  # SD's UNet
        >>> emb(torch.tensor([0, 250, 999])).shape
        torch.Size([3, 320])
        >>> emb(torch.tensor([0.5, 999.25])).shape                              # real t
        torch.Size([2, 320])
        >>> Timesteps(320, True, 0, compat="original")  # diffusers' float32 numbers
        Timesteps(320, flip_sin_to_cos=True, ..., compat='original')
    """

    def __init__(
        self,
        dim: int,
        flip_sin_to_cos: bool = False,
        downscale_freq_shift: float = 1,
        scale: float = 1,
        max_period: float = 10000,
        *,
        compat: str | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        options = {
            "flip_sin_to_cos": flip_sin_to_cos,
            "downscale_freq_shift": downscale_freq_shift,
            "scale": scale,
            "max_period": max_period,
        }
        super().__init__(TIMESTEP.name, options, grid=False, device=device, dtype=dtype)
        self.dim = check_int("dim", dim, minimum=1)
        self.compat = None if compat is None else check_choice("compat", compat, ("original",))
        self._plan = _traceable(channel_plan(self.enc, self.dim, 1, self.label, None))

    def forward(self, timesteps: Tensor) -> Tensor:
        """The embedding of ``timesteps`` (``[*]``, integer or real): ``[*, dim]``."""
        if self.compat is not None:
            original: Tensor = sinusoidal.encode(
                timesteps,
                self.dim,
                preset=TIMESTEP.name,
                dtype=self._dtype,
                compat=self.compat,
                **self.options,
            )
            return original
        pos = as_positions(timesteps, "timesteps", on_device=True)
        out: Tensor = evaluate.points(
            self._plan, pos, coords=False, dtype=self._dtype, padding_idx=None
        )
        return out

    if TYPE_CHECKING:  # calls typed as forward's, for type checkers
        __call__ = forward

    def extra_repr(self) -> str:
        compat = "" if self.compat is None else f", compat={self.compat!r}"
        return f"{self.dim}, " + ", ".join(f"{k}={v!r}" for k, v in self.options.items()) + compat
