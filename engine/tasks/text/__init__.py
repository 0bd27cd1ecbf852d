"""Text tasks (``text_mlm``, ``text_span``): the recipe and its narrative in :mod:`.recipe`, the New run /
Mask lab preview in :mod:`.preview`, interactive fill-in and completion in :mod:`.inference`, shared pieces
in :mod:`.common`."""
