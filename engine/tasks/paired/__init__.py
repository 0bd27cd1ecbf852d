"""Joint image-text masked modeling (``task: paired``, M3AE / FLAVA-style), and what the audio-text
task (:mod:`engine.tasks.paired_audio`) shares with it.

Modules: :mod:`.common` (constants, the caption's task parameters and visualisation masks),
:mod:`.recipe` (:class:`~.recipe.PairedBase`, the recipe both paired tasks share, and ``PairedTask``),
:mod:`.preview` (New run and Mask lab), :mod:`.inference` (the retrieval box).
"""
