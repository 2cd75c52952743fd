"""The originals' own float32 arithmetic (``compat=`` modes), kept apart from the exact engine.

- :mod:`.sinusoid`: the float32 tables of the PyTorch tutorial, Whisper, fairseq and diffusers;
- :mod:`.transformers`: transformers' float32 RoPE, and how its configs map to ``posenc.rope``;
- :mod:`.diffusers`: diffusers' 2D sin-cos table and its rotary tables (FLUX, the video and
  image grids);
- :mod:`.timm`: timm's float32 2D sin-cos table and rotary tables;
- :mod:`.transformers_vision`: the rotary tables of transformers' vision towers;
- :mod:`.rotation`: the originals' rotations (``apply_rope(compat=…)``);
- :mod:`.grid`: what the grid replays share.

The originals are torch code, so these modules compute with torch and import it: they are
reached only through a ``compat`` argument or :meth:`RotaryEmbedding.from_hf`.
"""
