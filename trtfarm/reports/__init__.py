"""Run reports: a table of every target's outcome and figures, as HTML, Markdown and a Prefect artifact's text."""
