"""What an encoding is: pure data and the rules over it, with no array library in sight.

- :mod:`.encoding`: :class:`~posenc.Encoding`, the frozen description of a sinusoidal encoding;
- :mod:`.frequencies`: how the angular frequencies of a block are spaced;
- :mod:`.layout`: the channel plan, where each sine, cosine and zero goes;
- :mod:`.rotary`: :class:`Rotary`, the rotary spec, and the rotary layouts;
- :mod:`.scaling`: the RoPE scaling rules, each one registry entry;
- :mod:`.presets`: every convention in use, as named data.
"""
