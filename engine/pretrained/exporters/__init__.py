"""Exporters: a masklab model's weights in the layout another library reads (the inverse of
:mod:`engine.pretrained.importers`), each a pure function from a loaded model to ``file name -> bytes``.

- :mod:`.image`: an image MAE (:class:`~engine.models.mae.MaskedAutoencoderViT`) as a folder that
  ``transformers.ViTMAEForPreTraining.from_pretrained`` loads, or as the MAE repository's ``.pth``;
- :mod:`.text`: the exact BERT (:class:`~engine.models.bert_hf.HFBertMLM`) as a folder that
  ``transformers.BertForMaskedLM`` and ``transformers.AutoTokenizer`` load.

None of them imports ``transformers``: the files are written by hand (``safetensors``, ``torch``,
``json``). :mod:`engine.pretrained.export` picks the exporter, refuses what none can express and
publishes the files atomically.
"""
