"""fedbook: the book's machinery, beside the pages it serves.

fedlib is the library (data, models, the federation, the method contract, the round loop and its
engines, the methods, heads, statistics and the papers' mathematics); fedbook is what turns its
runs into the book's evidence and pages, and nothing in fedlib imports it:

- :mod:`fedbook.claims`: a paper's claims declared before the numbers exist, paired intervals
  over seeds and the decision rules;
- :mod:`fedbook.checks`: the check table of a derivations chapter;
- :mod:`fedbook.tables`: tables whose text form is the table;
- :mod:`fedbook.page`: a chapter's setup (profiles, papermill's parameters), tables and numbers
  for reading, the claims report, the build's records;
- :mod:`fedbook.parallel`: a chapter's independent seeds in worker processes;
- :mod:`fedbook.benchmarks`: a round's memory and time, sequential against stacked clients;
- ``fedbook.studies``: each chapter's study over seeds and settings, and a derivations chapter's
  checks on seeded random instances.
"""
