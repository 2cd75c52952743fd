"""The tests of the image and video families: one file per family record
(src/posenc/spec/families/<name>.py), and the builders they share (models.py)."""
