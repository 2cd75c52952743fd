"""The posenc application: the ``posenc`` command, table files, figures, the demo.

Kept apart from the library core (``posenc``), which never imports it. The matching behind
``posenc identify`` is core (``posenc.api.identify``): checkpoint loading in the torch modules
uses it too.
"""
