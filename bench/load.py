"""The dashboard under load (issue 38, point 6): page response idle, then while runs train and wait
and several people browse; page errors, lock and read errors, the Streamlit process's memory.

    python bench/load.py                               # 10 minutes: 2 runs training, 2 queued, 5 sessions
    python bench/load.py --minutes 1 --json load.json
    python bench/load.py --workspace WS                # WS holds 2+ completed runs; the load runs go into it

What runs: the real server (``python -m app.serve`` on a free loopback port) and Debian's Chromium
through Playwright, on a workspace with two completed, evaluated runs to browse (by default the test
session's shared image runs of :mod:`tests.runs`, trained here in a few seconds: MAE and SimMIM on
digits, in a temporary folder).

1. **Idle**: no run active, one browser session visits Runs, Run detail of a completed run and Compare
   of the two completed runs: ``--warm-up`` cycles that warm the server up (imports, caches; not
   timed), then ``--idle-cycles`` timed cycles.
2. **Load**, for ``--minutes``: ``--training`` runs train and ``--queued`` wait for a slot
   (``$MASKLAB_MAX_RUNS`` = ``--training``; tiny MAEs on digits of ``--steps`` steps, one torch thread
   each, new reconstruction samples ``--evals`` times, no evaluation at their end; a run that ends
   is replaced at once, so the queue stays full),
   while ``--sessions`` browser sessions (contexts of one Chromium: a Streamlit session each) cycle
   Runs, Run detail of the completed run, Run detail of a training run and Compare of the completed
   runs and a training one, staying ``--dwell`` seconds on each page (its live panels refresh then);
   the sessions start spread over the pages, and the window is prolonged (2 minutes at most) until
   every page has been visited.

Figures:

- **page response**: from ``goto`` until the page's main content is drawn (Runs: the run table and a
  loss chart; Run detail: the heading of its figure table and its last section, Checkpoint; Compare:
  its export buttons, the last thing it draws) and Streamlit's status widget is gone; p50 and p95
  of each phase and of each page.
- **page errors**: an exception or an ``st.error`` box on the page (looked for once the page is drawn
  and again when the session leaves it), an image left broken on screen when it leaves, a JavaScript
  error, a console error or a failed request (HTTP 4xx/5xx: e.g. an image that a live panel's
  refresh replaced, and Streamlit dropped, before the browser fetched it) in the browser, a page not
  drawn within ``--page-timeout``; and tracebacks in the server's log. Counted by kind.
- **lock and read errors**: what the engine says when a reader meets a run held by another process or
  a file being written: ``RunLockedError`` ("held by another live process"), ``DamagedFileError``
  ("unreadable ..."), metrics segments missing or "kept changing while being read", a run folder the
  index skipped: in a page's error and warning boxes, the server's log and the load runs' worker logs
  (``runs/<id>/worker.log``); and a load run that ended other than completed.
- **memory**: the Streamlit process's resident set (VmRSS of ``/proc/<pid>/status``) every
  ``--sample-s`` seconds. The load window in thirds: the first is warm-up (every session's first
  visits), and the memory is flat when the last third's mean is within 10% of the middle third's.
- the CPU the bench's processes used in each phase, in cores: the server, the browser (Chromium and
  Playwright's driver: here on the same machine, where a user's browser would not be), the load
  runs' workers; and the 1-minute load average (``os.getloadavg``), whoever causes it.

Targets (issue 38): 0 page errors, 0 lock or read errors, p95 under load at most 3 x the idle p95,
the memory flat. Each figure is printed beside its target; the exit status is 1 when one is missed.
A figure is this machine's at this moment: run it on a quiet machine and give the load average with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.api import ACTIVE, RunConfig, cancel, list_runs, local_admin, read_log, submit  # noqa: E402
from tests.app.test_browser import ARTIFACTS, CHART, CHROMIUM, stop_server  # noqa: E402
from tests.app.test_browser_access import serve  # noqa: E402

PAGES_IDLE = ("runs", "run_detail", "compare")
PAGES_LOAD = ("runs", "run_detail", "run_detail_live", "compare")
P95_FACTOR = 3.0  # p95 under load at most this many times the idle p95
MEMORY_DRIFT = 0.10  # the last third's mean RSS within this fraction of the middle third's
#: What the engine says when a reader meets a run held by another process or a file being written
#: (engine.errors.RunLockedError / DamagedFileError, engine.store.metrics, engine.store.index).
LOCK_READ = re.compile(r"RunLockedError|held by another live process|DamagedFileError|unreadable|are missing \(|"
                       r"kept changing while being read|skipping run folder|BlockingIOError")
#: The load runs: a tiny MAE on the bundled digits, one torch thread, no evaluation at the end.
LOAD_RUN = {"data": {"dataset": "digits"}, "model": {"preset": "tiny", "patch_size": 2}, "evaluation": {"auto": False},
            "train": {"batch_size": 32, "warmup_steps": 10, "device": "cpu", "num_threads": 1}}
#: Streamlit's frontend, opened at a page's own URL (``/run_detail?run=...``), first asks for
#: ``/run_detail/_stcore/health`` and ``host-config`` (404), then for the root's: its known behaviour
#: (streamlit/streamlit#7074), not an error of the page.
SUBPATH_PROBE = re.compile(r"://[^/]+/[^?#]+/_stcore/(health|host-config|allowed-message-origins)$")
SCREENSHOTS = 5  # at most this many screenshots of failed pages (test-artifacts/load-*.png)


@dataclass
class Options:
    """What :func:`run` does (the command-line options)."""

    minutes: float = 10.0
    sessions: int = 5
    training: int = 2
    queued: int = 2
    steps: int = 6000
    evals: int = 10
    dwell: float = 2.0
    warm_up: int = 1
    idle_cycles: int = 10
    sample_s: float = 5.0
    page_timeout: float = 60.0


@dataclass
class Visit:
    """One navigation: ``seconds`` from ``goto`` to the main content drawn (None: not drawn)."""

    phase: str
    session: int
    page: str
    at: float  # seconds since the start of the bench
    seconds: float | None
    errors: list[str] = field(default_factory=list)
    lock_read: list[str] = field(default_factory=list)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the block (the server and the load runs' workers inherit them)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def say(t0: float, what: str) -> None:
    """A progress line on stderr: seconds since ``t0`` (``time.monotonic``), then ``what``."""
    print(f"[{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)


def shared_workspace(root: Path) -> Path:
    """Train the test session's shared image runs (MAE and SimMIM on digits, evaluated) under
    ``root`` and copy them into ``root/workspace``; returns that workspace."""
    from tests.runs import SharedRuns  # noqa: PLC0415 (trains with torch; not needed with --workspace)

    shared = Path(os.environ.get("MASKLAB_SHARED", REPO.parent / "shared")) / "data"
    ws, _ = SharedRuns(root / "shared-runs", shared).copy("image_mae", "simmim", dest=root / "workspace")
    return ws


def rss_mb(pid: int) -> float | None:
    """Resident set of process ``pid`` in MiB (``/proc/<pid>/status``); None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_cpu(root: int, server: int) -> dict[int, tuple[str, int]]:
    """The processes descending from ``root`` (this bench): pid -> (kind, CPU clock ticks used so far),
    kind one of ``server`` (pid ``server``), ``browser`` (Chromium and Playwright's driver),
    ``training`` (the load runs' workers) and ``other``."""
    procs: dict[int, tuple[int, str, int]] = {}  # pid -> (parent, name, ticks)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on
            procs[int(d.name)] = (int(fields[1]), name, int(fields[11]) + int(fields[12]))  # ppid; utime + stime
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        _, name, ticks = procs[pid]
        if pid == server:
            kind = "server"
        elif name.startswith(("chromium", "chrome", "node")):
            kind = "browser"
        else:
            try:
                cmd = (Path(f"/proc/{pid}/cmdline").read_bytes()).replace(b"\0", b" ")
            except OSError:
                cmd = b""
            kind = "training" if b"engine.runner.worker" in cmd else "other"
        out[pid] = (kind, ticks)
    return out


class Sampler(threading.Thread):
    """Samples the server's RSS, the 1-minute load average and the CPU time of this bench's processes
    by kind (:func:`process_cpu`) every ``every`` seconds, tagged with the phase the bench is in
    (:attr:`phase`, set by the caller)."""

    def __init__(self, pid: int, every: float, t0: float):
        super().__init__(daemon=True)
        self.pid, self.every, self.t0 = pid, every, t0
        self.phase = "start"
        self.samples: list[tuple[float, str, float | None, float]] = []  # (s since start, phase, MiB, load1)
        self.cpu: dict[str, dict[str, float]] = {}  # phase -> kind -> CPU seconds (and "wall": seconds sampled)
        self._ticks: dict[int, tuple[str, int]] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        hz, last = os.sysconf("SC_CLK_TCK"), time.monotonic()
        while not self._halt.is_set():
            now = time.monotonic()
            self.samples.append((now - self.t0, self.phase, rss_mb(self.pid), os.getloadavg()[0]))
            ticks = process_cpu(os.getpid(), self.pid)
            used = self.cpu.setdefault(self.phase, {"wall": 0.0})
            used["wall"] += now - last
            for pid, (kind, t) in ticks.items():  # a process that ended since the last sample: its last ticks are lost
                used[kind] = used.get(kind, 0.0) + (t - self._ticks.get(pid, (kind, 0))[1]) / hz
            self._ticks, last = ticks, now
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join()


class LoadKeeper(threading.Thread):
    """Keeps ``training + queued`` load runs active in ``ws`` (``$MASKLAB_MAX_RUNS`` = ``training``
    lets that many train, the rest wait): checks every 0.5 s and submits a new run for each one
    that ended. Records how many trained and waited at each check, and how the runs ended."""

    def __init__(self, ws: Path, opts: Options, t0: float):
        super().__init__(daemon=True)
        self.ws, self.opts, self.t0 = ws, opts, t0
        self.mine: list[str] = []
        self.running: list[str] = []  # the load runs training at the last check
        self.counts: list[tuple[float, int, int]] = []  # (s since start, training, queued)
        self.ended: dict[str, tuple[str, str]] = {}  # run id -> (status, error)
        self.errors: list[str] = []  # submits that failed
        self._halt = threading.Event()

    def submit_one(self) -> None:
        """Submit one load run (:data:`LOAD_RUN`, ``opts.steps`` steps, ``opts.evals`` validations).

        Raises:
            MasklabError: the engine refused it (QueueFullError, StorageError...).
        """
        steps = self.opts.steps
        cfg = {**LOAD_RUN, "name": f"load-{len(self.mine) + 1:03d}",
               "train": {**LOAD_RUN["train"], "steps": steps, "eval_interval": max(1, steps // self.opts.evals),
                         "checkpoint_interval": max(1, steps // 4)}}
        self.mine.append(submit(RunConfig.from_dict(cfg), self.ws, actor=local_admin()))

    def check(self) -> tuple[int, int]:
        """Submit runs until ``training + queued`` are active; returns ``(training, queued)`` seen."""
        mine = set(self.mine)
        records = [r for r in list_runs(self.ws) if r.run_id in mine]
        for r in records:
            if r.status not in ACTIVE and r.run_id not in self.ended:
                self.ended[r.run_id] = (r.status, r.error or "")
        self.running = [r.run_id for r in records if r.status == "running"]
        queued = sum(r.status == "queued" for r in records)
        for _ in range(self.opts.training + self.opts.queued - len(self.running) - queued):
            try:
                self.submit_one()
            except Exception as e:  # noqa: BLE001 (a refused submit is a figure of the report, not the end of it)
                self.errors.append(f"submit: {type(e).__name__}: {e}")
        return len(self.running), queued

    def run(self) -> None:
        while not self._halt.is_set():
            n_run, n_queued = self.check()
            self.counts.append((time.monotonic() - self.t0, n_run, n_queued))
            self._halt.wait(0.5)

    def live_run(self, k: int) -> str | None:
        """A load run training now (the ``k``-th of them, round the list); None when none is."""
        running = list(self.running)
        return running[k % len(running)] if running else None

    def stop(self) -> None:
        self._halt.set()
        self.join()


def markers(page, name: str) -> list:
    """The locators that are all visible once page ``name`` has drawn its main content."""
    if name == "runs":
        return [page.get_by_test_id("stDataFrame").first, page.get_by_test_id("stVegaLiteChart").locator(CHART).first]
    if name.startswith("run_detail"):
        return [page.get_by_role("heading", name="Validation figure and baselines"),
                page.get_by_test_id("stExpander").get_by_text("Checkpoint", exact=True)]
    return [page.get_by_text("Download HTML report")]


async def page_problems(page, leaving: bool = False) -> tuple[list[str], list[str]]:
    """``(errors, lock or read errors)`` the page shows now: exception boxes and ``st.error`` boxes,
    and when ``leaving`` the images left broken on screen (loaded, no pixels); error and warning
    boxes that say a run was locked or a file could not be read."""
    exceptions = await page.get_by_test_id("stException").all_inner_texts()
    errors = await page.get_by_test_id("stAlertContentError").all_inner_texts()
    warnings = await page.get_by_test_id("stAlertContentWarning").all_inner_texts()
    problems = [f"exception: {t.strip()[:300]}" for t in exceptions] + [f"error box: {t.strip()[:300]}" for t in errors]
    if leaving:
        broken = await page.evaluate("() => [...document.querySelectorAll('img')]"
                                     ".filter(i => i.src && i.complete && i.naturalWidth === 0).map(i => i.src)")
        problems += [f"broken image on screen when leaving: {src[:200]}" for src in broken]
    return problems, [t.strip()[:300] for t in errors + warnings + exceptions if LOCK_READ.search(t)]


class Browsing:
    """Browser sessions that visit pages and record each :class:`Visit`."""

    def __init__(self, url: str, completed: list[str], opts: Options, t0: float):
        self.url, self.completed, self.opts, self.t0 = url, completed, opts, t0
        self.visits: list[Visit] = []
        self.keeper: LoadKeeper | None = None
        self.load_window = (0.0, 0.0)  # seconds since the start: the load phase's first and last
        self.shots = 0

    def address(self, name: str, k: int) -> str | None:
        """The URL of page ``name`` for session ``k``; None when it has nothing to show now (no run training)."""
        live = self.keeper.live_run(k) if self.keeper is not None else None
        if name == "runs":
            return self.url
        if name == "run_detail":
            return f"{self.url}/run_detail?run={self.completed[0]}"
        if name == "run_detail_live":
            return f"{self.url}/run_detail?run={live}" if live else None
        ids = self.completed[:2] + ([live] if live else [])  # under load: a training run too
        return f"{self.url}/compare?runs={','.join(ids)}"

    async def visit(self, page, phase: str, k: int, name: str, url: str, console: list[str]) -> Visit:
        """Open ``url`` in ``page``, time it until page ``name`` is drawn, stay ``dwell`` seconds, and
        collect what went wrong meanwhile (``console``: the session's browser errors, emptied here)."""
        from playwright.async_api import expect  # noqa: PLC0415 (requirements-dev.txt: imported where a browser is driven)

        console.clear()
        t = time.perf_counter()
        v = Visit(phase, k, name, round(t - self.t0, 2), None)
        deadline = t + self.opts.page_timeout
        try:
            await page.goto(url, timeout=self.opts.page_timeout * 1000)
            for m in markers(page, name):
                await expect(m).to_be_visible(timeout=max(1, deadline - time.perf_counter()) * 1000)
            await expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=max(1, deadline - time.perf_counter()) * 1000)
            v.seconds = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 (a page not drawn is a figure of the report)
            v.errors.append(f"not drawn within {self.opts.page_timeout:.0f} s: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        seen = set()
        for when in ("drawn", "leaving"):
            if when == "leaving":
                await page.wait_for_timeout(self.opts.dwell * 1000)
            with contextlib.suppress(Exception):  # a page that went away meanwhile: nothing more to read
                errors, lock_read = await page_problems(page, leaving=when == "leaving")
                v.errors += [e for e in errors if e not in seen]
                v.lock_read += [e for e in lock_read if e not in seen]
                seen.update(errors + lock_read)
        v.errors += [f"browser: {c}" for c in console]
        if v.errors and self.shots < SCREENSHOTS:
            self.shots += 1
            ARTIFACTS.mkdir(exist_ok=True)
            with contextlib.suppress(Exception):
                await page.screenshot(path=str(ARTIFACTS / f"load-{phase}-{name}-{self.shots}.png"), full_page=True)
        self.visits.append(v)
        return v

    async def session(self, browser, phase: str, k: int, pages: tuple[str, ...], start: int = 0,
                      cycles: int | None = None, until: float | None = None, timed: bool = True) -> None:
        """Session ``k``: visit ``pages`` in turn from the ``start``-th, ``cycles`` times round, or until
        ``time.monotonic()`` passes ``until`` and every page of ``pages`` has been visited in ``phase``
        (by any session); ``timed`` False: the visits are not kept (warm-up)."""
        ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
        page = await ctx.new_page()
        console: list[str] = []

        def on_console(m) -> None:  # a failed request's console line has no address: the response's has
            if m.type == "error" and not m.text.startswith("Failed to load resource"):
                console.append(f"console error: {m.text[:300]}")

        def on_response(r) -> None:
            if r.status >= 400 and not SUBPATH_PROBE.search(r.url):
                console.append(f"HTTP {r.status} {r.url[:200]}")

        page.on("console", on_console)
        page.on("response", on_response)
        page.on("pageerror", lambda e: console.append(f"page error: {str(e)[:300]}"))

        def more(i: int) -> bool:
            if cycles is not None:
                return i < start + cycles * len(pages)
            seen = {v.page for v in self.visits if v.phase == phase}
            now = time.monotonic()  # a page no session could visit yet gets at most 2 more minutes
            return now < until or (not seen >= set(pages) and now < until + 120)

        try:
            i = start
            while more(i):
                name = pages[i % len(pages)]
                i += 1
                url = self.address(name, k)
                if url is None:
                    await asyncio.sleep(0.5)  # no run training this moment (one ended, the next is starting)
                    continue
                v = await self.visit(page, phase, k, name, url, console)
                if not timed:
                    self.visits.remove(v)
                    say(self.t0, f"  {name}: {'not drawn' if v.seconds is None else f'{v.seconds:.1f} s'}"
                                 f"{''.join(f'; {e}' for e in v.errors[:3])}")
        finally:
            await ctx.close()


async def browse(b: Browsing, ws: Path, sampler: Sampler) -> None:
    """The idle phase, then the load phase (its runs started and kept by ``b.keeper``, a
    :class:`LoadKeeper` that the caller stops)."""
    from playwright.async_api import async_playwright  # noqa: PLC0415 (requirements-dev.txt: imported where a browser is driven)

    opts, t0 = b.opts, b.t0
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                          args=["--no-sandbox", "--disable-gpu", "--disable-quic",
                                                "--disable-background-networking"])  # fmt: skip
        try:
            if opts.warm_up:
                sampler.phase = "warm-up"
                say(t0, f"warm-up: {opts.warm_up} cycle(s), not timed")
                await b.session(browser, "warm-up", 0, PAGES_IDLE, cycles=opts.warm_up, timed=False)
            sampler.phase = "idle"
            say(t0, f"idle: {opts.idle_cycles} cycles of {', '.join(PAGES_IDLE)}")
            await b.session(browser, "idle", 0, PAGES_IDLE, cycles=opts.idle_cycles)
            sampler.phase = "starting load"
            say(t0, f"starting the load runs: {opts.training} training, {opts.queued} queued")
            b.keeper = LoadKeeper(ws, opts, t0)
            b.keeper.start()
            deadline = time.monotonic() + 180
            while not (b.keeper.counts and b.keeper.counts[-1][1:] == (opts.training, opts.queued)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the load runs did not reach {opts.training} training and {opts.queued} "
                                       f"queued within 180 s: {b.keeper.counts[-1:]}, {b.keeper.errors[:3]}")
                await asyncio.sleep(0.5)
            sampler.phase = "load"
            say(t0, f"load: {opts.sessions} sessions for {opts.minutes:g} min")
            start = time.monotonic()
            await asyncio.gather(*(b.session(browser, "load", k, PAGES_LOAD, start=k * len(PAGES_LOAD) // opts.sessions,
                                             until=start + opts.minutes * 60) for k in range(opts.sessions)))
            b.load_window = (start - t0, time.monotonic() - t0)
            sampler.phase = "end"
            say(t0, "load window over")
        finally:
            await browser.close()


def quantiles(xs: list[float]) -> dict:
    """``{"n", "p50_s", "p95_s"}`` of ``xs`` (seconds; None when empty)."""
    if not xs:
        return {"n": 0, "p50_s": None, "p95_s": None}
    return {"n": len(xs), "p50_s": round(float(np.percentile(xs, 50)), 3), "p95_s": round(float(np.percentile(xs, 95)), 3)}


def phase_figures(visits: list[Visit], phase: str, pages: tuple[str, ...]) -> dict:
    """p50 / p95 of the drawn pages of ``phase``, overall and by page, and how many were not drawn."""
    mine = [v for v in visits if v.phase == phase]
    drawn = [v.seconds for v in mine if v.seconds is not None]
    return {**quantiles(drawn), "not_drawn": sum(v.seconds is None for v in mine),
            "pages": {p: {**quantiles([v.seconds for v in mine if v.page == p and v.seconds is not None]),
                          "visits": sum(v.page == p for v in mine)} for p in pages}}


def memory_figures(samples: list[tuple[float, str, float | None, float]], window: tuple[float, float]) -> dict:
    """The server's RSS (MiB): idle mean, the load window's thirds (warm-up, middle, last), peak, and
    the drift of the last third's mean from the middle third's."""
    a, b = window
    third = (b - a) / 3

    def mean(xs: list[float | None]) -> float | None:
        xs = [x for x in xs if x is not None]
        return round(float(np.mean(xs)), 1) if xs else None

    idle = mean([m for _, ph, m, _ in samples if ph == "idle"])
    middle = mean([m for t, _, m, _ in samples if a + third <= t < a + 2 * third])
    last = mean([m for t, _, m, _ in samples if a + 2 * third <= t <= b])
    all_mb = [m for _, _, m, _ in samples if m is not None]
    drift = round(last / middle - 1, 4) if middle and last else None
    return {"idle_mb": idle, "warm_up_mb": mean([m for t, _, m, _ in samples if a <= t < a + third]), "middle_mb": middle,
            "last_mb": last, "peak_mb": round(max(all_mb), 1) if all_mb else None, "drift": drift,
            "samples": len(all_mb)}


#: Kinds of page errors, for the report: (kind, pattern matched against the error's text), first match wins.
ERROR_KINDS = (("not drawn", "not drawn within"), ("exception box", "exception: "), ("st.error box", "error box: "),
               ("broken image on screen", "broken image on screen"),
               ("image 404 (replaced before fetched)", r"(HTTP 404 |Image source error - )\S+/media/"),
               ("other HTTP error", "HTTP [45]"),
               ("JavaScript error", "page error: "), ("console error", "console error: "))


def error_kinds(errors: list[str]) -> dict[str, int]:
    """How many of ``errors`` (page error lines) are of each kind of :data:`ERROR_KINDS`."""
    out: dict[str, int] = {}
    for e in errors:
        kind = next((k for k, pattern in ERROR_KINDS if re.search(pattern, e)), "other")
        out[kind] = out.get(kind, 0) + 1
    return out


def log_problems(path: Path) -> tuple[list[str], list[str]]:
    """``(tracebacks, lock or read errors)``: the lines of the log at ``path`` that start a traceback,
    and those that say a run was locked or a file could not be read."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return [], []
    tracebacks = [f"{path.name}: {lines[i + 1].strip() if i + 1 < len(lines) else ''}"[:300]
                  for i, ln in enumerate(lines) if ln.startswith("Traceback")]
    return tracebacks, [f"{path.name}: {ln.strip()[:300]}" for ln in lines if LOCK_READ.search(ln)]


def cancel_load(ws: Path, ids: list[str], timeout: float = 60) -> None:
    """Cancel the load runs still active and wait (at most ``timeout`` s) until none is."""
    for rid in ids:
        with contextlib.suppress(Exception):
            cancel(rid, ws, actor=local_admin())
    deadline = time.monotonic() + timeout
    while any(r.is_active for r in list_runs(ws) if r.run_id in set(ids)) and time.monotonic() < deadline:
        time.sleep(0.5)


def run(ws: Path, opts: Options) -> dict:
    """Serve ``ws`` (2+ completed runs), browse it idle then under load; returns every figure, each
    target with whether it was met (``targets``), and ``met`` (all of them)."""
    t0 = time.monotonic()
    with environment(MASKLAB_WORKSPACE=str(ws), MASKLAB_MAX_RUNS=str(opts.training), MASKLAB_AUTO_EVAL="0"):
        completed = [r.run_id for r in list_runs(ws) if r.status == "completed"]
        if len(completed) < 2:
            raise SystemExit(f"{ws}: needs at least 2 completed runs to browse (Compare), found {len(completed)}")
        load_start = os.getloadavg()[0]
        say(t0, f"serving {ws}")
        proc, url = serve(ws)
        log = ws.parent / f"serve-{url.rsplit(':', 1)[1]}.log"
        sampler = Sampler(proc.pid, opts.sample_s, t0)
        sampler.start()
        b = Browsing(url, completed, opts, t0)
        try:
            asyncio.run(browse(b, ws, sampler))
        finally:
            try:
                sampler.stop()
                if b.keeper is not None:
                    b.keeper.stop()
                    cancel_load(ws, b.keeper.mine)
            finally:  # whatever failed above, no server is left behind
                stop_server(proc)
                say(t0, "server stopped")
    keeper = b.keeper
    visits = b.visits
    idle, load = phase_figures(visits, "idle", PAGES_IDLE), phase_figures(visits, "load", PAGES_LOAD)
    memory = memory_figures(sampler.samples, b.load_window)
    tracebacks, server_lock_read = log_problems(log)
    worker_lock_read = []
    for rid in keeper.mine:
        text = read_log(rid, 1_000_000, ws) or ""
        worker_lock_read += [f"{rid}/worker.log: {ln.strip()[:300]}" for ln in text.splitlines() if LOCK_READ.search(ln)]
    failed = [f"{rid}: {status}: {error[:300]}" for rid, (status, error) in keeper.ended.items() if status != "completed"]
    page_errors = [f"{v.phase} {v.page} (session {v.session}, at {v.at:.0f} s): {e}" for v in visits for e in v.errors]
    lock_read = ([f"{v.phase} {v.page} (session {v.session}): {e}" for v in visits for e in v.lock_read]
                 + server_lock_read + worker_lock_read + [f"load run {f}" for f in failed if LOCK_READ.search(f)])
    in_window = [(n, q) for t, n, q in keeper.counts if b.load_window[0] <= t <= b.load_window[1]]
    held = sum(n == opts.training and q == opts.queued for n, q in in_window)
    loads = [(ph, l1) for _, ph, _, l1 in sampler.samples]
    ratio = round(load["p95_s"] / idle["p95_s"], 2) if load["p95_s"] and idle["p95_s"] else None
    targets = {
        "page_errors": {"value": len(page_errors) + len(tracebacks), "target": "0"},
        "lock_read_errors": {"value": len(lock_read), "target": "0"},
        "load_runs_failed": {"value": len(failed), "target": "0"},
        "p95_ratio": {"value": ratio, "target": f"<= {P95_FACTOR:g}"},
        "memory_drift": {"value": memory["drift"], "target": f"within {MEMORY_DRIFT:.0%}"},
    }
    targets["page_errors"]["met"] = targets["page_errors"]["value"] == 0
    targets["lock_read_errors"]["met"] = not lock_read
    targets["load_runs_failed"]["met"] = not failed
    targets["p95_ratio"]["met"] = ratio is not None and ratio <= P95_FACTOR and load["not_drawn"] == 0
    targets["memory_drift"]["met"] = memory["drift"] is not None and abs(memory["drift"]) <= MEMORY_DRIFT
    return {
        "options": asdict(opts), "cpus": os.cpu_count(), "idle": idle, "load": load, "p95_ratio": ratio,
        "page_errors": page_errors, "page_error_kinds": error_kinds(page_errors), "server_tracebacks": tracebacks,
        "lock_read_errors": lock_read, "memory": memory,
        "load_runs": {"submitted": len(keeper.mine), "completed": sum(s == "completed" for s, _ in keeper.ended.values()),
                      "failed": failed, "submit_errors": keeper.errors,
                      "held": round(held / len(in_window), 3) if in_window else None,
                      "training_min": min((n for n, _ in in_window), default=None),
                      "queued_min": min((q for _, q in in_window), default=None),
                      "training_max": max((n for n, _ in in_window), default=None),
                      "queued_max": max((q for _, q in in_window), default=None)},
        "loadavg": {"start": round(load_start, 2),
                    "idle_mean": _mean([l1 for ph, l1 in loads if ph == "idle"]),
                    "load_mean": _mean([l1 for ph, l1 in loads if ph == "load"]),
                    "load_max": round(max((l1 for ph, l1 in loads if ph == "load"), default=0), 2),
                    "end": round(os.getloadavg()[0], 2)},
        "cpu_share": {ph: {k: round(v / used["wall"], 2) for k, v in used.items() if k != "wall"}
                      for ph, used in sampler.cpu.items() if ph in ("idle", "load") and used["wall"] > 0},
        "targets": targets, "met": all(t["met"] for t in targets.values()),
    }


def _mean(xs: list[float]) -> float | None:
    return round(float(np.mean(xs)), 2) if xs else None


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def report(r: dict) -> str:
    """The figures as a table, each beside its target."""
    o, t, m, lr = r["options"], r["targets"], r["memory"], r["load_runs"]
    ok = {True: "ok", False: "MISSED"}
    drift = "-" if m["drift"] is None else f"{m['drift']:+.1%}"
    out = [f"load: {o['training']} training, {o['queued']} queued, {o['sessions']} browser sessions, "
           f"{o['minutes']:g} min; {r['cpus']} CPUs",
           f"{'':<34}{'p50':>9}{'p95':>9}{'pages':>7}   target"]
    for phase in ("idle", "load"):
        f = r[phase]
        target = (f"p95 <= {P95_FACTOR:g} x idle p95 (ratio {r['p95_ratio']}): {ok[t['p95_ratio']['met']]}"
                  if phase == "load" else "")
        out.append(f"{'page response, ' + phase:<34}{_s(f['p50_s']):>9}{_s(f['p95_s']):>9}{f['n']:>7}   {target}")
        for p, g in f["pages"].items():
            out.append(f"{'  ' + p:<34}{_s(g['p50_s']):>9}{_s(g['p95_s']):>9}{g['n']:>7}")
    out += [
        f"{'page errors':<34}{t['page_errors']['value']:>25}   0: {ok[t['page_errors']['met']]}"
        f"  ({', '.join(f'{n} {k}' for k, n in r['page_error_kinds'].items()) or 'none on the pages'}; "
        f"{len(r['server_tracebacks'])} server tracebacks)",
        f"{'lock or read errors':<34}{t['lock_read_errors']['value']:>25}   0: {ok[t['lock_read_errors']['met']]}",
        f"{'load runs that failed':<34}{t['load_runs_failed']['value']:>25}   0: {ok[t['load_runs_failed']['met']]}",
        f"{'Streamlit RSS (MiB)':<34}idle {m['idle_mb']}, load: warm-up {m['warm_up_mb']}, middle {m['middle_mb']}, "
        f"last third {m['last_mb']}, peak {m['peak_mb']} ({m['samples']} samples)",
        f"{'  drift, last third / middle':<34}{drift:>25}   within {MEMORY_DRIFT:.0%}: {ok[t['memory_drift']['met']]}",
        f"{'load held':<34}{o['training']} training + {o['queued']} queued at {lr['held']:.0%} of the checks "
        f"(training {lr['training_min']}..{lr['training_max']}, queued {lr['queued_min']}..{lr['queued_max']}); "
        f"{lr['submitted']} runs submitted, {lr['completed']} completed" if lr["held"] is not None else "load held: no check",
        *(f"{'CPU used, ' + ph + ' (cores)':<34}" + ", ".join(f"{k} {v:.2f}" for k, v in sorted(c.items()))
          for ph, c in r["cpu_share"].items()),
        f"{'load average (1 min)':<34}start {r['loadavg']['start']}, idle {r['loadavg']['idle_mean']}, "
        f"load mean {r['loadavg']['load_mean']} max {r['loadavg']['load_max']}, end {r['loadavg']['end']}",
    ]
    for title, items in (("page errors", r["page_errors"] + r["server_tracebacks"]), ("lock or read errors", r["lock_read_errors"]),
                         ("failed load runs", lr["failed"] + lr["submit_errors"])):
        if items:
            out.append(f"{title} (first 10 of {len(items)}):")
            out += [f"  {e}" for e in items[:10]]
    missed = [k for k, v in t.items() if not v["met"]]
    out.append("every target met" if not missed else f"targets missed: {', '.join(missed)}")
    return "\n".join(out)


def main(argv=None) -> int:
    """Run the bench with the command line ``argv``; print the table (and write ``--json``); returns
    the exit status: 0 when every target was met, else 1."""
    d = Options()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=d.minutes, help="length of the load window")
    ap.add_argument("--sessions", type=int, default=d.sessions, help="browser sessions under load")
    ap.add_argument("--training", type=int, default=d.training, help="runs training at once ($MASKLAB_MAX_RUNS)")
    ap.add_argument("--queued", type=int, default=d.queued, help="runs waiting for a slot")
    ap.add_argument("--steps", type=int, default=d.steps, help="steps of each load run (about 20 ms each on one core)")
    ap.add_argument("--evals", type=int, default=d.evals,
                    help="validations (new reconstruction samples) per load run, evenly spaced")
    ap.add_argument("--dwell", type=float, default=d.dwell, help="seconds a session stays on a page once it is drawn")
    ap.add_argument("--warm-up", type=int, default=d.warm_up, help="untimed cycles of the idle pages first")
    ap.add_argument("--idle-cycles", type=int, default=d.idle_cycles, help="timed cycles of the idle pages")
    ap.add_argument("--sample-s", type=float, default=d.sample_s, help="seconds between memory samples")
    ap.add_argument("--page-timeout", type=float, default=d.page_timeout, help="seconds a page may take to be drawn")
    ap.add_argument("--workspace", type=Path, default=None,
                    help="a workspace with 2+ completed runs, used in place (default: train the shared image runs)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here as JSON")
    args = ap.parse_args(argv)
    if min(args.sessions, args.training, args.idle_cycles, args.evals) < 1 or min(args.queued, args.warm_up) < 0 or args.minutes <= 0:
        ap.error("--sessions, --training, --evals and --idle-cycles must be at least 1, --queued and --warm-up at least 0, "
                 "--minutes above 0")
    opts = Options(**{k: v for k, v in vars(args).items() if k not in ("workspace", "json")})
    with tempfile.TemporaryDirectory(prefix="masklab-load-") as tmp:
        ws = args.workspace.resolve() if args.workspace else shared_workspace(Path(tmp))
        result = run(ws, opts)
    print(report(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
