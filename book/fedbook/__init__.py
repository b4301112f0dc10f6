"""fedbook: the book's machinery, beside the pages it serves.

fedlib is the library (data, models, the federation, the method contract, the round loop and its
engines, the methods, heads, statistics and the papers' mathematics); fedbook is what turns its
runs into the book's evidence and pages, and nothing in fedlib imports it:

- :mod:`fedbook.intervals`: paired intervals over seeds (Student's t floored by the test noise,
  the bootstrap) and per-seed summaries;
- :mod:`fedbook.claims`: a paper's claims declared before the numbers exist, each naming the frame,
  rows and column it reads (:class:`fedbook.claims.Read`), and the decision rules;
- :mod:`fedbook.checks`: the check table of a derivations chapter;
- :mod:`fedbook.tables`: tables whose text form is the table;
- :mod:`fedbook.study`: the study runner, a grid of settings x seeds -> tidy frames, each cell
  cached on disk under a key of what it depends on (:mod:`fedbook.sources` says which modules a
  function runs; :mod:`fedbook.parallel` runs the cells in worker processes);
- :mod:`fedbook.page`: a chapter's setup (profiles, papermill's parameters), tables and numbers
  for reading, the claims report, the glued numbers;
- :mod:`fedbook.catalog`: the build's records and the book's index, which the findings and
  teaching pages read;
- :mod:`fedbook.benchmarks`: a round's memory and time, sequential against stacked clients;
- ``fedbook.studies``: one module per chapter, named after its notebook: its cells, claim frames,
  tables, figures and numbers, or a derivations chapter's checks on seeded random instances.
"""
