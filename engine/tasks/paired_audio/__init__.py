"""Joint audio-text masked modeling (``task: paired_audio``): the paired recipe on an audio dataset's
clips and their texts.

Modules: :mod:`.pairs` (:class:`~.pairs.AudioTextPairs`: an audio dataset read as spectrogram-text
pairs, the text sources), :mod:`.recipe` (the task). Previews and the retrieval box are the paired
task's (:mod:`engine.tasks.paired.preview`, :mod:`engine.tasks.paired.inference`), which ask the
config's task for the spectrogram half.
"""
