"""The self-contained HTML profile report: ``page.render`` and its stylesheet (profile.css, inlined)."""
