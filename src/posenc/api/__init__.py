"""The public functions, thin front-ends over the evaluation layer (:mod:`posenc.evaluate`):

- :mod:`.sinusoidal`: ``table``, ``encode``, ``grid``;
- :mod:`.presets`: ``presets``, ``preset``; :mod:`.positions`: ``fairseq_positions``;
- :mod:`.detr`: ``detr``, DETR's sine embedding of a padding mask;
- :mod:`.rope`: ``rope``, the rotary tables; :mod:`.apply`: ``apply_rope``, the rotation;
- :mod:`.sharding`: context- and tensor-parallel positions and channels;
- :mod:`.identify`: which preset a stored table is (``posenc identify``, checkpoint loading).

They call the evaluation layer and the spec; ``posenc`` re-exports them.
"""
