"""Warm render time of every dashboard page, and of an interactive box's answer (issue 41, point 7).

    python bench/page_render.py                          # trains the shared test runs, then times
    python bench/page_render.py --workspace WS           # a workspace that already has runs
    python bench/page_render.py --pages runs,mask_lab --renders 3
    python bench/page_render.py --profile run_detail     # cProfile of one warm render, top functions

Without ``--workspace`` the runs are the test session's shared runs (:mod:`tests.runs`: one short,
completed, evaluated run per task, trained through the real worker), one per kind of
:data:`KINDS`, copied into one workspace, so the pages show what the page tests read: image MAE and
SimMIM on digits, a text MLM, an audio MAE, audio frames and image-caption pairs.

Each page is rendered in Streamlit's AppTest (the server-side script run a browser's request
triggers): the first render is discarded (it starts AppTest's runtime, imports torch and fills the
caches a running server already holds), then the median of ``--renders`` renders of the same page,
what a reload or a widget change costs. Run detail and Presentation are rendered once per run (their
views are the modality's), Mask lab once per dataset, then after a change of its mask ratio (a
setting not drawn yet: what a user's click costs). Each line stands next to the 1 s target of issue 41. Then Run detail's
fill-in box answers typed sentences with its checkpoint already loaded (``st.cache_resource``):
the median of those reruns against the 2 s target.

A figure is this machine's at this moment: say how busy it was (``uptime``) next to it.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from streamlit.components.v2 import manifest_scanner  # noqa: E402
from streamlit.logger import get_logger  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

# A server scans the installed packages for Streamlit components once at start-up; every new
# AppTest would scan again (0.1 to 0.3 s), which no page render costs a user.
manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
# AppTest's bare-mode notice ("missing ScriptRunContext"), once per page: not a figure of this report.
get_logger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
    lambda record: "missing ScriptRunContext" not in record.getMessage())

ENTRY = REPO / "app" / "streamlit_app.py"
PAGE_TARGET_S = 1.0
BOX_TARGET_S = 2.0
#: Shared test runs put together (kinds whose datasets share a name cannot be: text_span, paired_audio_text).
KINDS = ("image_mae", "simmim", "text_mlm", "audio_mae", "audio_frames", "paired_image_text")
#: page name -> script; the order of the sidebar.
PAGES = {"data": "data.py", "new_run": "new_run.py", "mask_lab": "mask_lab.py", "runs": "runs.py",
         "run_detail": "run_detail.py", "compare": "compare.py", "sweeps": "sweeps.py", "present": "present.py",
         "audit": "audit.py"}
PER_RUN = ("run_detail", "present")  # rendered once per run: ?run=<id>
PER_DATASET = ("mask_lab",)  # rendered once per dataset: ?data.dataset=<name>, then after a change
#: Mask lab "after a change": the mask ratio moves to each of these in turn (a setting not drawn yet).
CHANGE_RATIOS = (0.5, 0.6, 0.7, 0.8, 0.4, 0.3)
SENTENCES = ("what is the [MASK] of the moon ?", "who wrote the [MASK] ?", "where is the [MASK] river ?",
             "how many [MASK] are in a year ?")


def shared_workspace(root: Path, kinds: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    """Train the shared test runs of ``kinds`` (:class:`tests.runs.SharedRuns`) under ``root`` and copy
    them into one workspace: ``(workspace, {kind: run id})``."""
    from tests.runs import SharedRuns  # noqa: PLC0415 (trains with torch; not needed with --workspace)

    shared = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"
    runs = SharedRuns(root / "shared-runs", shared)
    return runs.copy(*kinds, dest=root / "workspace")


def workspace_runs(ws: Path) -> dict[str, str]:
    """``{run name: run id}`` of the completed runs of ``ws``, newest first."""
    from engine.api import list_runs  # noqa: PLC0415 (after MASKLAB_WORKSPACE is set)

    return {r.name: r.run_id for r in list_runs() if r.status == "completed"}


def datasets(ws: Path) -> list[str]:
    """Names of the datasets of ``ws`` that a run of it trained on (bundled ones only when used)."""
    from engine.api import get_run  # noqa: PLC0415 (as workspace_runs: after MASKLAB_WORKSPACE is set)

    names = []
    for rid in workspace_runs(ws).values():
        name = (get_run(rid).config.get("data") or {}).get("dataset")
        if name and name not in names:
            names.append(name)
    return names


def page_at(script: str, params: dict[str, str]) -> AppTest:
    """A fresh session on ``script`` with ``params`` as its URL (not run yet)."""
    at = AppTest.from_file(str(ENTRY), default_timeout=600)
    at.switch_page(f"../pages/{script}")
    for k, v in params.items():
        at.query_params[k] = v
    return at


def render(at: AppTest) -> float:
    """Seconds of one script run of ``at``; raises when the page raised or showed an error."""
    t = time.perf_counter()
    at.run()
    dt = time.perf_counter() - t
    bad = [e.value for e in at.exception] + [e.value for e in at.error]
    if bad:
        raise RuntimeError(f"page failed: {bad[0]!s:.300}")
    return dt


def time_page(script: str, params: dict[str, str], renders: int) -> tuple[float, float]:
    """``(first, median of the next renders)`` of ``script`` in seconds."""
    at = page_at(script, params)
    first = render(at)
    return first, statistics.median(render(at) for _ in range(max(1, renders)))


def time_change(script: str, params: dict[str, str], renders: int, label: str = "Mask ratio") -> float | None:
    """Median seconds of the rerun after the first slider labelled ``label`` moves to a value not drawn yet (the
    page's caches miss, as on a user's change); None when the page has no such slider (a strategy
    with its own budget)."""
    at = page_at(script, params)
    render(at)
    times = []
    for r in CHANGE_RATIOS[: max(1, renders)]:
        sliders = [s for s in at.slider if s.label == label]
        if not sliders:
            return None
        sliders[0].set_value(r)
        times.append(render(at))
    return statistics.median(times)


def time_fill_in(run_id: str, renders: int) -> tuple[float, float]:
    """``(first answer, median of the next)`` of Run detail's fill-in box of text run ``run_id``:
    each answer is the rerun after a new sentence is typed, with the checkpoint loaded by the page
    before the clock starts."""
    at = page_at(PAGES["run_detail"], {"run": run_id})
    render(at)
    render(at)  # the model is loaded and cached now
    box = at.text_input(key=f"fill_text_{run_id}")
    times = []
    for i in range(max(2, renders + 1)):
        box.input(SENTENCES[i % len(SENTENCES)])
        times.append(render(at))
        if not at.dataframe:
            raise RuntimeError("the fill-in box showed no predictions")
        box = at.text_input(key=f"fill_text_{run_id}")
    return times[0], statistics.median(times[1:])


def profile_page(script: str, params: dict[str, str], top: int = 30) -> str:
    """The ``top`` functions by cumulative time of one warm render of ``script`` (cProfile of the
    script thread: AppTest runs the page in a thread of its own, as a server does)."""
    from streamlit.runtime.scriptrunner.script_runner import ScriptRunner  # noqa: PLC0415 (--profile only: patched for one render)

    at = page_at(script, params)
    render(at)
    prof = cProfile.Profile()
    original = ScriptRunner._run_script

    def profiled(self, rerun_data):
        prof.enable()
        try:
            return original(self, rerun_data)
        finally:
            prof.disable()

    ScriptRunner._run_script = profiled
    try:
        render(at)
    finally:
        ScriptRunner._run_script = original
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue().replace(str(REPO) + "/", "").replace(".venv/lib/python3.11/site-packages/", "")


def line(label: str, first: float, warm: float, target: float, renders: int) -> str:
    verdict = "ok" if warm <= target else f"{warm / target:.1f}x over"
    return f"{label:<34} warm {warm:6.2f} s  (first {first:5.2f} s, median of {renders})   target <= {target:.0f} s: {verdict}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workspace", type=Path, default=None, help="a workspace with completed runs (default: train the shared test runs)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="shared runs to train without --workspace (keys of tests.runs.SPECS)")
    ap.add_argument("--pages", default=",".join(PAGES), help=f"pages to time, of {', '.join(PAGES)}")
    ap.add_argument("--renders", type=int, default=3, help="warm renders per page (their median is printed)")
    ap.add_argument("--no-box", action="store_true", help="skip the fill-in box")
    ap.add_argument("--profile", default=None, help="print a cProfile of one warm render of this page instead")
    ap.add_argument("--run", default=None, help="with --profile run_detail / present: the run's name (default: the newest)")
    args = ap.parse_args(argv)
    pages = [p.strip() for p in args.pages.split(",") if p.strip()]
    unknown = [p for p in pages + ([args.profile] if args.profile else []) if p not in PAGES]
    if unknown:
        ap.error(f"--pages/--profile: unknown page {unknown[0]!r}; pages: {', '.join(PAGES)}")

    t0 = time.time()
    if args.workspace is None:
        root = Path(tempfile.mkdtemp(prefix="masklab-page-render-"))
        os.environ["MASKLAB_WORKSPACE"] = str(root / "workspace")
        ws, ids = shared_workspace(root, tuple(k for k in args.kinds.split(",") if k))
        print(f"trained the shared runs {', '.join(ids)} in {time.time() - t0:.0f} s ({ws})")
    else:
        ws = args.workspace
        os.environ["MASKLAB_WORKSPACE"] = str(ws)
    os.environ.setdefault("MASKLAB_AUTO_EVAL", "0")
    runs = workspace_runs(ws)
    if not runs:
        print(f"no completed run in {ws}")
        return 1
    print(f"{len(runs)} runs: {', '.join(runs)}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    if args.profile:
        params = {"run": runs.get(args.run) or next(iter(runs.values()))} if args.profile in PER_RUN else {}
        if args.profile == "compare":
            params = {"runs": ",".join(runs.values())}
        print(profile_page(PAGES[args.profile], params))
        return 0

    over = 0
    for page in pages:
        script = PAGES[page]
        if page in PER_RUN:
            cases = [(f"{page} ({name})", {"run": rid}) for name, rid in runs.items()]
        elif page in PER_DATASET:
            cases = [(f"{page} ({name})", {"data.dataset": name}) for name in datasets(ws)]
        else:
            cases = [(page, {"runs": ",".join(runs.values())} if page == "compare" else {})]
        for label, params in cases:
            try:
                first, warm = time_page(script, params, args.renders)
                change = time_change(script, params, args.renders) if page in PER_DATASET else None
            except Exception as e:  # noqa: BLE001 (a failing page is a line of the report, not the end of it)
                print(f"{label:<34} FAILED: {e!s:.200}")
                over += 1
                continue
            over += warm > PAGE_TARGET_S
            print(line(label, first, warm, PAGE_TARGET_S, args.renders), flush=True)
            if change is not None:
                over += change > PAGE_TARGET_S
                verdict = "ok" if change <= PAGE_TARGET_S else f"{change / PAGE_TARGET_S:.1f}x over"
                print(f"{'  after a ratio change':<34} {change:11.2f} s  (median of {args.renders} new ratios)"
                      f"{'':>9}target <= {PAGE_TARGET_S:.0f} s: {verdict}", flush=True)

    if not args.no_box:
        text = [(n, r) for n, r in runs.items() if "mlm" in n or "trec" in n]
        if not text:
            print("fill-in box: no text MLM run in the workspace")
        else:
            name, rid = text[0]
            try:
                first, warm = time_fill_in(rid, args.renders)
                over += warm > BOX_TARGET_S
                print(line(f"fill-in box answer ({name})", first, warm, BOX_TARGET_S, args.renders))
            except Exception as e:  # noqa: BLE001
                print(f"fill-in box ({name}) FAILED: {e!s:.200}")
                over += 1
    print(f"{over} over target; load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
