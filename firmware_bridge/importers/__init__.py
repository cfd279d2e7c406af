"""Converters from datasets bundled in Python packages into WheelFed recordings (nothing downloaded).

Each importer module has ``import_all(out_dir) -> list[Path]``; the recordings replay through the
real serial path like a live session. Imports are reproducible byte for byte (``created_us`` is 0:
the recording's creation time is the dataset's, which is unknown).
"""
