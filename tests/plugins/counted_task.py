"""``counted_mim``: ``image_mim`` whose :meth:`~engine.tasks.Task.resolve` appends a line (pid and
command) to the file named by ``$MASKLAB_RESOLVE_LOG`` before resolving, in whatever process calls
it: the test's, or a worker's (workers import the plug-ins of ``$MASKLAB_PLUGINS`` too).
:func:`engine.tasks.resolve` calls its task's ``resolve`` exactly once, so the file's lines count
the resolutions of a run's config. Loaded with ``MASKLAB_PLUGINS=tests.plugins.counted_task``.
"""

from __future__ import annotations

import os
import sys

from engine.tasks import register_task
from engine.tasks.image.recipe import ImageMIMTask

LOG_ENV = "MASKLAB_RESOLVE_LOG"


@register_task
class CountedImageTask(ImageMIMTask):
    name = "counted_mim"

    @classmethod
    def resolve(cls, cfg) -> None:
        path = os.environ.get(LOG_ENV)
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {' '.join(sys.argv[:2])}\n")
        super().resolve(cfg)
