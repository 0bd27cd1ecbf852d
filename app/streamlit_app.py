"""masklab dashboard entry: a router over the pages in ``../pages/``.

Run with ``python -m app.serve`` (or ``streamlit run app/streamlit_app.py``). The entry stays in
``app/`` on purpose: a ``pages/`` folder beside the entry script would switch on Streamlit's legacy
automatic page menu next to the ``st.navigation`` one.

Before any page, on every rerun: the exposure check (``app.serve.exposure_problem``: an address
other than 127.0.0.1 needs sign-in), then the sign-in gate (``app.components.access``). The pages a
session gets follow its role: read-only sessions (a viewer, or ``MASKLAB_MODE=demo``) get Runs, Run
detail, Compare, Sweeps and Presentation (Compare without its Evaluate button); editors every page; admins also the Audit page. The engine checks the role again in
every write call, so hiding is only a convenience.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # so pages can `import engine` and `import app.components`
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402
from streamlit import config as st_config  # noqa: E402

from app.components.access import identity_bar, read_only, sign_in_gate  # noqa: E402
from app.components.images import PIXELATED_CSS  # noqa: E402
from app.serve import exposure_problem, signin_configured  # noqa: E402
from engine.api import MasklabError, acting_as, can, is_demo  # noqa: E402

st.set_page_config(page_title="masklab", layout="wide", initial_sidebar_state="auto")  # Presentation: "collapsed"
st.html(PIXELATED_CSS)  # upscaled 8x8 digits stay crisp squares; a thin frame shows padding

try:
    problem = exposure_problem(st.get_option("server.address"), signin_configured())
except MasklabError as e:  # a broken users file or MASKLAB_MODE: refuse rather than open
    problem = str(e)
if problem:
    st.error(problem)
    st.stop()
if is_demo():  # Streamlit's upload endpoint then refuses every file (app.serve sets it at start too)
    st_config.set_option("server.maxUploadSize", 0)
who = sign_in_gate()
identity_bar(who)

# Page paths are relative to this file. The titles here are the sidebar labels; pages link to each
# other with the same paths (st.page_link("../pages/run_detail.py")). No icons: emoji need an emoji
# font and Material icons a web font, and a machine offline without either shows empty boxes.
READ_ONLY = ["../pages/runs.py", "../pages/run_detail.py", "../pages/compare.py", "../pages/sweeps.py",
             "../pages/present.py"]
PAGES = {
    "../pages/data.py": "Data",
    "../pages/models.py": "Models",
    "../pages/new_run.py": "New run",
    "../pages/mask_lab.py": "Mask lab",
    "../pages/runs.py": "Runs",
    "../pages/run_detail.py": "Run detail",
    "../pages/compare.py": "Compare",
    "../pages/sweeps.py": "Sweeps",
    "../pages/present.py": "Presentation",
    "../pages/audit.py": "Audit",
}
shown = [p for p in PAGES if (p in READ_ONLY or not read_only(who)) and (p != "../pages/audit.py" or can("audit.read", who))]
with acting_as(who):
    st.navigation([st.Page(p, title=PAGES[p], default=p == "../pages/runs.py") for p in shown]).run()
