"""The posenc application: the ``posenc`` command, table files, figures, the demo, identify.

Kept apart from the library core (``posenc``), which never imports it.
"""
