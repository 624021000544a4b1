"""Tests of the agent-log readers, one module per format (plus the shared pieces and the
registry), against the real fixtures (see ``tests/features/conftest.py``).

Every expected count in them was checked BY HAND against the fixture files with jq/grep
one-liners that do not use the readers; the command used is in the comment next to it.
"""
