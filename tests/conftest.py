"""Hypothesis profiles: random examples on a developer's machine, a fixed sequence in CI
(``HYPOTHESIS_PROFILE=ci``) so that a run of the same commit always gives the same result."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The start-up cache (oomdoctor.read.cache) of the test run: its own directory, never the
# user's; the CLI runs the tests start inherit it.
import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

os.environ["OOMDOCTOR_CACHE_DIR"] = _CACHE = tempfile.mkdtemp(prefix="oomdoctor-test-cache-")
atexit.register(shutil.rmtree, _CACHE, True)
