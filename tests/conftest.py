"""Hypothesis profiles: random examples on a developer's machine, a fixed sequence in CI
(``HYPOTHESIS_PROFILE=ci``) so that a run of the same commit always gives the same result."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
