"""Every place the dashboard builds HTML from what a user or a model wrote (token strings, class names
from an upload, captions, run labels in the HTML report, the reconstruction matrix's text cells)
escapes it: a hostile string comes out as text, never as markup."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app.components.compare import report_html
from app.components.matrix import token_html
from app.modalities import paired, text
from engine.store import Sample

HOSTILE = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def _clean(html: str) -> None:
    assert HOSTILE not in html and ESCAPED in html, html  # as text: the markup never appears raw


def _mlm_sample() -> Sample:
    tokens = np.array([["[CLS]", HOSTILE, "is", "[SEP]"]])
    mask = np.array([[False, True, False, False]])
    top = np.array([[["", ""], [HOSTILE, "x"], ["", ""], ["", ""]]])
    return Sample(3, "text_mlm", {"tokens": tokens, "mask": mask, "top_tokens": top,
                                  "top_probs": np.full(top.shape, 0.5, np.float32), "labels": np.array([0])},
                  {"class_names": [HOSTILE]})


def test_text_views_escape_tokens_and_class_names(monkeypatch):
    drawn = []
    monkeypatch.setattr(text.st, "html", drawn.append)
    text.mlm_samples_view(_mlm_sample(), None)
    (html,) = drawn
    _clean(html)
    assert html.count(ESCAPED) == 2  # the hidden token and the class name
    _clean(text.masked_sentences_html(np.array([["a", "b"]]), np.array([[True, False]]), [HOSTILE]))
    _clean(text.sentence_html([HOSTILE, "b"], [True, False]))


def test_matrix_text_cells_escape_tokens_and_predictions():
    s = _mlm_sample()
    for cell in text.matrix_cells(s, 1):
        for key in ("html_original", "html_recon", "html_error"):
            _clean(cell[key])
    _clean(token_html(["a", "b"], [False, True], fill=["", HOSTILE]))


def test_paired_caption_lines_escape_class_names_and_tokens():
    tokens = np.array([["[CLS]", HOSTILE, "cat", "[SEP]"]])
    s = Sample(2, "paired", {"tokens": tokens, "text_mask": np.array([[False, True, False, False]]),
                             "pred_tokens": tokens.copy(), "caption_from_image": tokens.copy(), "labels": np.array([0])},
               {"class_names": [HOSTILE]})
    lines, summary = paired._caption_lines(s, "image")
    html = "".join(paired._caption_line(label, body) for label, body in lines[0])
    _clean(html)


@pytest.mark.parametrize("where", ["title", "table", "caption", "note"])
def test_the_compare_report_escapes_run_labels_everywhere(where):
    title = HOSTILE if where == "title" else "t"
    table = pd.DataFrame({"run": [HOSTILE if where == "table" else "r"], "x": [1.0]})
    images = [(HOSTILE if where == "caption" else "c", np.zeros((2, 2, 3), np.uint8))]
    notes = [HOSTILE] if where == "note" else []
    _clean(report_html(title, [("Downstream", table)], images, notes))
