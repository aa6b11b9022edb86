"""The package's version (recorded in every marker textebm writes: `textebm.outputs`)."""

__version__ = "0.1.0"
