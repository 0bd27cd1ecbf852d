"""Audio tasks: masked spectrogram modeling (``audio_mae``) and masked frame prediction (``audio_frames``).

Both see the run's log-mel windows (:mod:`engine.audio.features`: ``data.audio`` sets the mel bins,
window, hop and the window length ``clip_seconds``; per-bin normalisation from the train split;
short clips padded with silence that is never masked nor scored, long clips cut into a random
window in training).

- ``audio_mae`` (AudioMAE, Huang et al. 2022): the spectrogram ``[1, F, T]`` is cut into
  ``P_f x P_t`` patches (``model.patch_size`` mel bins x ``task_params.patch_frames`` frames, square
  by default) on a ``[B, F/P_f, T/P_t]`` grid; any 2-D audio strategy masks it (random patches at
  80% as AudioMAE, SpecAugment time / frequency bands, periodic, voiced columns); the
  ``audio_mae_vit`` model (MAE's encoder on the visible patches, light decoder) predicts every patch;
  the objective (MSE or L1, optionally per-patch normalised) scores the masked patches.
- ``audio_frames`` (wav2vec 2.0 / data2vec style): tokens of ``model.patch_size`` frames on a
  ``[B, T/k]`` grid; 1-D strategies (``span_starts`` as wav2vec 2.0, ``span``, random, time bands,
  periodic, voiced segments) choose the hidden tokens; the ``frame_transformer`` encoder sees every
  token with masked ones replaced by a mask embedding and predicts either the masked frames
  (``task_params.target: mel``, segment reconstruction) or the features of an EMA teacher
  (``target: ema``, data2vec; the teacher is updated in :meth:`after_step` and checkpointed with
  the weights). With the EMA target a readout head on the detached encoder output learns the
  frames (its MSE is added to the loss as ``loss/readout``; it does not reach the encoder), so the
  run still shows reconstructions.

Side inputs: ``voiced`` (energy voice activity per frame, any voiced frame in a patch column or a
token) is computed from the waveform of every clip once. ``eligible`` = the positions that hold a
frame of the clip (a patch column or token whose first frame is real).

Validation (on at most :data:`EVAL_MAX_ROWS` val clips, first window, fixed masks from
``train.seed + 10_000``): ``val_loss`` (the objective), ``val_spec_mse`` (the headline: mean
squared error of the predicted normalised log-mel over the masked real cells, comparable across
models and targets), next to ``baseline/mean_spec_mse`` (every masked cell = its bin's train mean)
and ``baseline/interp_spec_mse`` (linear interpolation in time between the nearest visible frames
of the same mel bin) on the same masks. Samples: ``train.num_vis`` representative val clips' spectrograms
(original, masked, reconstructed) and Griffin-Lim audio of the original and of the reconstruction.
Frozen features (probes): the encoder on every window of a clip with nothing masked, the mean and
standard deviation of the clip's tokens (padding excluded), windows averaged.

Modules: :mod:`.common` (the mask grid, the masks a run draws, the spectrogram figures and
baselines, the pre-flight pieces: shared with the audio-text pairs of ``paired_audio``),
:mod:`.recipe` (the tasks), :mod:`.preview` (New run and Mask lab).
"""
