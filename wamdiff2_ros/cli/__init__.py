"""The ``wamdiff2`` command: one parser, one module per verb."""
