"""Old module paths (before the layout by pipeline stage) keep working for one release.

``import oomdoctor.reader`` still gives the module now at ``oomdoctor.read.reader``, with a
``DeprecationWarning`` naming the new path. Only the modules are aliased: the public API
(``oomdoctor.diagnose``, ``scan``, ``watch``, ``install_excepthook``, ``oomdoctor.report``'s
models) never moved.
"""
from __future__ import annotations

import importlib
import sys
import warnings

MOVED = {
    "oomdoctor.reader": "oomdoctor.read.reader",
    "oomdoctor.prefilter": "oomdoctor.read.prefilter",
    "oomdoctor.literals": "oomdoctor.read.literals",
    "oomdoctor.literal_index": "oomdoctor.read.literal_index",
    "oomdoctor.normalise": "oomdoctor.read.normalise",
    "oomdoctor.derived": "oomdoctor.facts.derived",
    "oomdoctor.sizes": "oomdoctor.facts.sizes",
    "oomdoctor.knowledge": "oomdoctor.kb.knowledge",
    "oomdoctor.classify": "oomdoctor.kb.classify",
    "oomdoctor.kbdocs": "oomdoctor.kb.docs",
    "oomdoctor.models_table": "oomdoctor.memory.shapes",
    "oomdoctor.fingerprint": "oomdoctor.report.fingerprint",
    "oomdoctor.render": "oomdoctor.report",
    "oomdoctor.render.common": "oomdoctor.report.common",
    "oomdoctor.render.text": "oomdoctor.report.text",
    "oomdoctor.render.markdown": "oomdoctor.report.markdown",
    "oomdoctor.render.json": "oomdoctor.report.json",
    "oomdoctor.capture": "oomdoctor.wrap.capture",
    "oomdoctor.cgroup": "oomdoctor.wrap.cgroup",
}


# Plain classes with the loader and finder protocols: importlib.abc would cost every start
# about 12 ms (it imports importlib.resources), for the few who still use an old path.
class _Alias:
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.own_spec  # the import system set the alias's spec on it


class MovedFinder:
    """Resolves an old module path to the module's new home, warning once per import."""

    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(f"{fullname} moved to {new}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=3)
        import importlib.util
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
