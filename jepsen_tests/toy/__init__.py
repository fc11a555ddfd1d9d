"""A toy cluster that stands in for Longboat in the harness's own tests."""
