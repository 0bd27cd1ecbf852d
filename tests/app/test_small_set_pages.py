"""What the pages say about a run's data (issue 37, point 5), in AppTest on real runs: the session's
TREC MLM run (8,000 ids asked of 400 questions' worth) and its unlabelled one (24 questions, no labels,
evaluated), and a Tux Paint paired run whose captions have no word for the CCA baseline.

- the tokenizer's real vocabulary wherever the tokenizer is shown (Runs, Run detail, Compare, New run),
  with a warning when it is far below the request;
- Run detail's evaluation says what it skipped and why (no labels), and shows what it measured;
- Run detail's baseline table says which baseline the data could not give.
"""

from __future__ import annotations

import json
import zipfile

import pytest

from engine.config import RunConfig
from engine.data import ImportOptions, import_source
from engine.tasks import resolve
from tests.app.pages import open_with
from tests.stamps import completed_run

FAR = "(8000 asked: far below)"


@pytest.fixture(scope="module")
def ws(tmp_path_factory, shared_runs):
    """``(workspace, {kind: run id})``: the shared TREC MLM runs, labelled and unlabelled, as $MASKLAB_WORKSPACE."""
    ws, ids = shared_runs.copy("text_mlm", "text_unlabelled", dest=tmp_path_factory.mktemp("smallsets") / "workspace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MASKLAB_WORKSPACE", str(ws))
        yield ws, ids


@pytest.fixture(scope="module")
def letters(ws, shared_data) -> str:
    """A 2-step paired run on four real Tux Paint stamps captioned with one letter each (no word for
    the CCA baseline's TF-IDF), in ``ws``; its id."""
    ws, _ = ws
    src = ws.parent / "letters.zip"
    with zipfile.ZipFile(src, "w") as z:
        table = "image,caption\n"
        for p, letter in zip(sorted((shared_data / "tuxpaint-stamps" / "images").glob("food__*.png"))[:4], "abcd"):
            z.write(p, f"images/{p.name}")
            table += f"images/{p.name},{letter}\n"
        z.writestr("captions.csv", table)
    import_source(src, "letters", ImportOptions(val_fraction=0.5), workspace=ws, image_size=16, geometry="pad")
    cfg = {"name": "letters", "task": "paired", "data": {"dataset": "letters", "tokenizer": {"vocab_size": 100, "max_len": 8}},
           "model": {"preset": "tiny", "patch_size": 4}, "evaluation": {"auto": False},
           "train": {"batch_size": 2, "steps": 2, "eval_interval": 2, "checkpoint_interval": 2, "warmup_steps": 0,
                     "device": "cpu", "num_threads": 1}}
    return completed_run(resolve(RunConfig.from_dict(cfg)).to_dict(), ws)


def vocab(ws, run_id: str) -> int:
    """The ids the run's tokenizer has, as its ``task.json`` records them."""
    return json.loads((ws / "runs" / run_id / "task.json").read_text())["vocab_size"]


def test_runs_page_shows_the_real_vocabulary_beside_the_one_asked(ws):
    ws, ids = ws
    at = open_with("../pages/runs.py", {})
    table = next(d.value for d in at.dataframe if "recipe" in d.value.columns).set_index("run id")
    n = vocab(ws, ids["text_unlabelled"])
    assert f"wordpiece {n} {FAR}" in table.loc[ids["text_unlabelled"], "recipe"]
    trec = vocab(ws, ids["text_mlm"])  # 400 TREC questions: near the 500 asked
    assert ("wordpiece 500 ·" if trec == 500 else f"wordpiece {trec} (500 asked) ·") in table.loc[ids["text_mlm"], "recipe"]
    assert "far below" not in table.loc[ids["text_mlm"], "recipe"]
    assert [w.value for w in at.warning] == [  # the cell may be cut on a narrow screen: said in full
        f"Tokenizer far below the vocabulary asked (ids it has, of those asked): notes-mlm · "
        f"{ids['text_unlabelled'][-6:]} ({n} of 8,000). Its Run detail says what to do."]


def test_run_detail_warns_of_a_vocabulary_far_below_its_request_and_says_what_the_evaluation_skipped(ws):
    ws, ids = ws
    at = open_with("../pages/run_detail.py", {"run": ids["text_unlabelled"]})
    n = vocab(ws, ids["text_unlabelled"])
    assert any(f"tokenizer `wordpiece {n} {FAR}`" in m.value for m in at.markdown)
    assert [w.value for w in at.warning if "data.tokenizer.vocab_size" in w.value] == [
        f"The tokenizer has {n} ids where 8,000 were asked (data.tokenizer.vocab_size), under 50% of the request: the "
        f"train texts of 'notes' hold too few distinct words and pieces for more. Ask for {n} or fewer (the same "
        "tokenizer, named for what it is), or import more text for a larger one."]
    assert [i.value for i in at.info if i.value.startswith("Not computed")] == [
        "Not computed: linear probe, kNN, k-means, fine-tune. 'notes' has no labels (every row is 'unlabeled'); "
        "import it with a label column or one sub-folder per class to score how well the features separate them."]
    assert not [t for t in at.table if "random init" in t.value.columns]  # no figure to fill the downstream table
    assert any(c.value.startswith("Validation figures of this checkpoint: ") and "val loss" in c.value for c in at.caption)


def test_compare_shows_each_runs_tokenizer_and_warns_of_the_one_far_below(ws):
    ws, ids = ws
    at = open_with("../pages/compare.py", {"runs": f"{ids['text_mlm']},{ids['text_unlabelled']}"})
    results = next(d.value for d in at.dataframe if "tokenizer" in d.value.columns)
    n = vocab(ws, ids["text_unlabelled"])
    assert f"wordpiece {n} {FAR}" in results["tokenizer"].tolist()
    assert [w.value for w in at.warning if "were asked" in w.value][0].startswith("notes-mlm")
    assert any("Not computed: linear probe, kNN, k-means, fine-tune. 'notes' has no labels" in c.value for c in at.caption)


def test_new_run_shows_the_tokenizer_this_dataset_gives_and_warns_when_far_below(ws):
    ws, ids = ws
    at = open_with("../pages/new_run.py", {"dataset": "notes", "task": "text_mlm", "data.tokenizer.max_len": "32"})
    n = vocab(ws, ids["text_unlabelled"])  # the run's tokenizer, cached: the same texts and settings
    assert any(c.value.startswith(f"Tokenizer: wordpiece {n} (8000 asked), trained on the train texts of **notes**")
               for c in at.caption), [c.value for c in at.caption]
    assert any(f"The tokenizer has {n} ids where 8,000 were asked" in w.value for w in at.warning)


def test_run_detail_names_the_baseline_its_data_could_not_give(letters):
    at = open_with("../pages/run_detail.py", {"run": letters})
    assert any("no CCA retrieval baseline: no train caption has a word of two letters or digits for its TF-IDF"
               in c.value for c in at.caption)
