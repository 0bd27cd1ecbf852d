"""Audio tasks (``audio_mae``, ``audio_frames``): the recipe and its narrative in :mod:`.recipe`, the New run /
Mask lab preview in :mod:`.preview`, the spectrogram pieces shared with ``paired_audio`` in :mod:`.common`."""
