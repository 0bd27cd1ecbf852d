"""Masked image modeling (``task: image_mim``): the recipe (:mod:`.recipe`: ``ImageMIMTask``,
``recipe_for``) and the interactive reconstruction of a checkpoint (:mod:`.inference`)."""
