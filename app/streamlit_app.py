"""masklab dashboard entry: a router over the pages in ``../pages/``.

Run with ``streamlit run app/streamlit_app.py``. The entry stays in ``app/`` on purpose: a
``pages/`` folder beside the entry script would switch on Streamlit's legacy automatic page menu
next to the ``st.navigation`` one.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # so pages can `import engine` and `import app.components`
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402

from app.components.images import PIXELATED_CSS  # noqa: E402

st.set_page_config(page_title="masklab", layout="wide")
st.html(PIXELATED_CSS)  # upscaled 8x8 digits stay crisp squares; a thin frame shows padding

# Page paths are relative to this file. The titles here are the sidebar labels; pages link to each
# other with the same paths (st.page_link("../pages/run_detail.py")). No icons: emoji need an emoji
# font and Material icons a web font, and a machine offline without either shows empty boxes.
PAGES = [
    st.Page("../pages/data.py", title="Data"),
    st.Page("../pages/new_run.py", title="New run"),
    st.Page("../pages/mask_lab.py", title="Mask lab"),
    st.Page("../pages/runs.py", title="Runs", default=True),
    st.Page("../pages/run_detail.py", title="Run detail"),
]

st.navigation(PAGES).run()
