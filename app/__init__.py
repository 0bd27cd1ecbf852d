"""masklab's Streamlit UI: the entry router (``streamlit_app.py``) and reusable components.

Pages live in ``../pages/`` (one short script each) and touch data only through the engine's
public API (``engine.data``, ``engine.masking``, ``engine.runner.launcher``, ``engine.store``).
"""
