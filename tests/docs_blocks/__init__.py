"""The command blocks of README.md and docs/*.md, run as a user runs them.

Each module here runs the blocks marked ``<!-- run by tests/docs_blocks/MODULE -->`` (tests/docrun.py
``run_marked_blocks``): in a clone of the repository of its own, outside it, the README's quick start first (every
section follows it), then each of its blocks twice in a row (once when its marker says ``once: WHY``: a later block
runs its steps again), in a venv that holds exactly what the text installs, from the wheel. The wheel and the venvs
are made once per session and shared by the modules, which pytest-xdist runs side by side. tests/test_doc_blocks.py
holds every command block to a marker and each marker to the module it names.
"""
