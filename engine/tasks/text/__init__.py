"""Text tasks: masked language modeling (``text_mlm``) and span completion (``text_span``).

Both tokenise the dataset with the run's tokenizer (``data.tokenizer``: WordPiece trained on the
train split, or characters; cached per dataset content and settings, so runs and sweeps with the
same settings share it; the run records its id in ``task.json``). Every text is encoded once as
``[CLS] tokens [SEP] [PAD]...``; a batch is cut to its longest row. Units are tokens on the
``[B, L]`` grid; ``[PAD]``, ``[CLS]`` and ``[SEP]`` are never eligible, so never masked or labelled.

- ``text_mlm`` (BERT, Devlin et al. 2019): any text strategy of the masking library (random,
  Bernoulli, span, whole-word, periodic...) chooses the predicted tokens; every row with a
  maskable token gets at least one (so no batch has nothing to score); BERT's 80/10/10
  replacement (:func:`engine.masking.mlm.apply_mlm`, shares in ``task_params``) corrupts the input;
  the ``bert`` model's MLM head runs at those positions only; cross-entropy on them.
  Validation shows every predicted position as ``[MASK]`` (no 10% unchanged tokens to copy), on
  fixed masks: ``val_loss`` (cross-entropy, nats/token), ``val_ppl``, ``val_top1``, ``val_top5``.
  Baselines on the same masks and tokenizer (:mod:`engine.eval.text_baselines`): the most frequent
  token, the most frequent token at each position, the bidirectional bigram.
- ``text_span`` (T5-style infilling, Raffel et al. 2020): a one-segment strategy
  (``sentence_span``: a whole sentence of 20-50% of the text where there are several, else a random
  segment) hides one contiguous span; the encoder sees the text with one sentinel (``[MASK]``) in
  its place, the decoder writes the span and ``[SEP]``. Validation: ``val_loss`` (teacher-forced
  cross-entropy), ``val_span_acc`` (greedy generation compared token by token with the span,
  ``[SEP]`` excluded: what the baselines are scored on), ``val_span_acc_len`` (the same with
  length-constrained decoding: the model is told the span's length, as the baselines are),
  ``val_span_acc_tf`` (teacher-forced top-1 on the span tokens; its baseline is ``bigram_tf_acc``,
  the bigram given the true previous token, logged as ``baseline/bigram_tf_acc/span_acc_tf``),
  ``val_span_acc_pos`` (told the length, each position's most probable token from the text and the
  position alone: ``SpanInfiller.per_position``; logged for runs trained with
  ``task_params.decoder_input_mask`` > 0), ``val_exact`` (the whole span and its end).

Modules: :mod:`.common` (the constants, tokenizer and rows of an encoded split, the masks a run
draws for its samples, shared by the others), :mod:`.recipe` (the tasks), :mod:`.preview` (New run
and Mask lab), :mod:`.inference` (the fill-in box and the completion view).
"""
