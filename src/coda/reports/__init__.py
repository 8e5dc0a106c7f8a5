"""`coda.reports` — what a run did, read back from its memory: `report.html` and the tables it draws.

- `build`  `build_report` / `write_report`: the self-contained `report.html` of a run (`coda report RUN_DIR`,
  and `coda run` at its end);
- `data`   `load_report_data`: the run's records read in one snapshot into typed tables (success per split and
  round, diagnoses and verdicts, failure modes, budgets, programs and their lineage);
- `page`   the page's sections as escaped HTML;
- `plots`  its figures (matplotlib PNGs).

Reports read the memory and render scenes; they sit above the engine (they read what it wrote) and below the
command line.
"""
