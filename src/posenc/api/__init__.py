"""The public functions, thin front-ends over the evaluation layer (:mod:`posenc.evaluate`):

- :mod:`.sinusoidal`: ``table``, ``encode``, ``grid``, ``fairseq_positions``, the preset lookups;
- :mod:`.detr`: ``detr``, DETR's sine embedding of a padding mask;
- :mod:`.rope`: ``rope``, the rotary tables;
- :mod:`.apply`: ``apply_rope``, the rotation;
- :mod:`.sharding`: context- and tensor-parallel positions and channels.

They call the evaluation layer, never each other; ``posenc`` re-exports them.
"""
