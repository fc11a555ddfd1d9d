"""jepsen_tests: real clusters of processes under faults, with history checkers."""
