"""In-process API: ``oomdoctor.watch()`` and ``oomdoctor.install_excepthook()``.

Inside the training process, at the moment an out-of-memory exception escapes, more is
known than any log shows: the installed versions, the allocator's statistics, the
launcher's rank variables. ``watch()`` writes those down in the formats the tools
themselves print (collect_env, DeepSpeed's banner, ``transformers env``,
``torch.cuda.memory_summary()``), adds the exception's traceback, runs the same pipeline
as ``oomdoctor diagnose``, logs the report through ``logging.getLogger("oomdoctor")``
and lets the original exception go on, untouched.

    with oomdoctor.watch(report_path="oom-rank{rank}.json"):
        trainer.train()

    @oomdoctor.watch()
    def main(): ...

    oomdoctor.install_excepthook()          # one line at the top of a script

torch is never imported here: its exception classes are recognised by name and message,
and its statistics are read only when the program has already imported it.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import sys
import traceback
from typing import Any, Callable, Optional

logger = logging.getLogger("oomdoctor")

PACKAGES = ("torch", "transformers", "deepspeed", "accelerate", "peft", "trl", "llamafactory", "axolotl", "xtuner")
# Imported modules that say which framework drives the job, most specific first:
# (module, framework name, package whose version is the framework's).
_FRAMEWORK_MODULES = (("llamafactory", "llamafactory", "llamafactory"), ("axolotl", "axolotl", "axolotl"),
                      ("xtuner", "xtuner", "xtuner"), ("trl", "trl", "trl"),
                      ("transformers.trainer", "hf-trainer", "transformers"), ("deepspeed", "deepspeed", "deepspeed"),
                      ("accelerate", "accelerate", "accelerate"))

# Exception classes that are out-of-memory failures whatever they say (anywhere in the MRO):
# torch.OutOfMemoryError / torch.cuda.OutOfMemoryError, Python's and numpy's MemoryError,
# TensorFlow's ResourceExhaustedError.
_OOM_CLASSES = {"OutOfMemoryError", "MemoryError", "ResourceExhaustedError"}
# Generic classes that carry an OOM in their message: RuntimeError (torch < 1.13, the CPU
# allocator, cuBLAS, NCCL's DistBackendError), torch.AcceleratorError ("CUDA error: out of
# memory" in recent torch), XLA/JAX runtime errors.
_TEXT_CLASSES = {"RuntimeError", "AcceleratorError", "XlaRuntimeError", "JaxRuntimeError"}
_OOM_TEXT = re.compile(r"out of memory|CUBLAS_STATUS_ALLOC_FAILED|RESOURCE_EXHAUSTED|OOM when allocating"
                       r"|can't allocate memory|not enough memory", re.I)
_MARK = "_oomdoctor_reported"


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:4000]
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the original failure
        return ""


def is_oom(exc: Optional[BaseException]) -> bool:
    """Whether an exception (or one it was raised from or during) is an out-of-memory failure."""
    depth = 0
    while exc is not None and depth < 8:
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & _OOM_CLASSES:
            return True
        if names & _TEXT_CLASSES and _OOM_TEXT.search(_message(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
        depth += 1
    return False


# -- what only the live process knows -----------------------------------------------------------

def installed_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Versions of the packages this process has imported (``__version__``, else package metadata).

    A package that is installed but not imported takes no part in the failure, and a
    banner line for it (``DeepSpeed info: ...``) would make it look like it ran.
    """
    from importlib import metadata
    out: dict[str, str] = {}
    for name in packages:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        version = getattr(mod, "__version__", None)
        if not isinstance(version, str):
            try:
                version = metadata.version(name)
            except Exception:  # noqa: BLE001 - not installed, or broken metadata
                version = None
        if version:
            out[name] = str(version)
    return out


def _torch_cuda():
    """torch.cuda when the program imported torch and already uses a CUDA device; else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        # never initialise CUDA ourselves: in an OOM handler that would cost a context
        if cuda is not None and cuda.is_available() and cuda.is_initialized():
            return cuda
    except Exception:  # noqa: BLE001
        pass
    return None


def _device_of(exc: BaseException, cuda) -> int:
    m = re.search(r"GPU (\d+)", _message(exc))
    if m:
        return int(m.group(1))
    try:
        return int(cuda.current_device())
    except Exception:  # noqa: BLE001
        return 0


def live_lines(exc: BaseException, versions: dict[str, str]) -> list[str]:
    """Banner lines in the formats the tools print, so the usual parsers read them."""
    lines: list[str] = []
    torch = sys.modules.get("torch")
    if "torch" in versions:
        lines.append(f"PyTorch version: {versions['torch']}")
        cuda_build = getattr(getattr(torch, "version", None), "cuda", None) if torch is not None else None
        if cuda_build:
            lines.append(f"CUDA used to build PyTorch: {cuda_build}")
    lines.append(f"Python version: {sys.version.split()[0]} (64-bit runtime)")
    cuda = _torch_cuda()
    if cuda is not None:
        try:
            names = [f"GPU {i}: {cuda.get_device_name(i)}" for i in range(cuda.device_count())]
            if names:
                lines.append("GPU models and configuration: " + names[0])
                lines.extend(names[1:])
        except Exception:  # noqa: BLE001
            pass
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    if conf:
        lines.append(f"Caching allocator config: {conf}")
    if "deepspeed" in versions:
        lines.append(f"DeepSpeed info: version={versions['deepspeed']}, git-hash=unknown, git-branch=unknown")
    if "transformers" in versions:
        lines.append(f"- `transformers` version: {versions['transformers']}")
    if "accelerate" in versions:
        lines.append(f"- `Accelerate` version: {versions['accelerate']}")
    for name in ("peft", "trl", "llamafactory", "axolotl", "xtuner"):
        if name in versions:
            lines.append(f"{name} version: {versions[name]}")
    world = os.environ.get("WORLD_SIZE")
    if world and world.isdigit():
        lines.append(f"WORLD_SIZE={world} RANK={os.environ.get('RANK', '?')} LOCAL_RANK={os.environ.get('LOCAL_RANK', '?')}")
    if cuda is not None:
        try:
            summary = cuda.memory_summary(device=_device_of(exc, cuda), abbreviated=True)
            lines.extend(summary.splitlines())
        except Exception:  # noqa: BLE001
            pass
    return lines


def exception_lines(exc: BaseException) -> list[str]:
    """The traceback as Python prints it, with torchrun's ``[rankN]:`` prefix when ranked."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # noqa: BLE001
        text = f"{type(exc).__module__}.{type(exc).__qualname__}: {_message(exc)}\n"
    rank = os.environ.get("RANK")
    world = os.environ.get("WORLD_SIZE", "1")
    prefix = f"[rank{rank}]:" if rank and rank.isdigit() and world.isdigit() and int(world) > 1 else ""
    return [prefix + line for line in text.splitlines()]


def _fill_environment(env, versions: dict[str, str], banner_lines: int = 0) -> None:
    """Fill in from the process itself what the parsers did not find.

    Nothing the exception says is overridden; values a parser inferred from our own banner
    lines (``banner_lines``: how many there are) give way to the live figures.
    """
    pairs = (("torch_version", "torch"), ("transformers_version", "transformers"), ("deepspeed_version", "deepspeed"),
             ("accelerate_version", "accelerate"), ("peft_version", "peft"), ("trl_version", "trl"))
    for field_name, pkg in pairs:
        if getattr(env, field_name) is None and pkg in versions:
            setattr(env, field_name, versions[pkg])
    fw_source = env.sources.get("framework")
    if env.framework is None or (fw_source is not None and fw_source <= banner_lines):
        # what the process imported says more than a guess from the banner lines
        for module, framework, package in _FRAMEWORK_MODULES:
            if module in sys.modules:
                env.framework = framework
                env.framework_version = versions.get(package)
                break
    if env.python_version is None:
        env.python_version = sys.version.split()[0]
    world = os.environ.get("WORLD_SIZE")
    if env.world_size is None and world and world.isdigit():
        env.world_size = int(world)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    if env.alloc_conf is None and conf:
        env.alloc_conf = conf
    cuda = _torch_cuda()
    if cuda is not None:
        try:
            index = cuda.current_device()
            props = cuda.get_device_properties(index)
            if env.accelerator is None:
                env.accelerator = "cuda"
            # the device's own figures beat what a parser inferred from our banner (a
            # capacity guessed from "A100-SXM4-80GB"), never what the exception says
            for name, value in (("gpu_name", props.name), ("gpu_capacity_bytes", int(props.total_memory)),
                                ("compute_capability", f"{props.major}.{props.minor}"),
                                ("gpu_count", int(cuda.device_count()))):
                source = env.sources.get(name)
                if getattr(env, name) is None or (source is not None and source <= banner_lines):
                    setattr(env, name, value)
            torch = sys.modules.get("torch")
            build = getattr(getattr(torch, "version", None), "cuda", None)
            if env.cuda_version is None and build:
                env.cuda_version = str(build)
        except Exception:  # noqa: BLE001
            pass


def _memory_stats_sample(exc: BaseException, line: int):
    """One allocator reading from torch.cuda.memory_stats(), for when no summary was parsed."""
    cuda = _torch_cuda()
    if cuda is None:
        return None
    try:
        device = _device_of(exc, cuda)
        stats = cuda.memory_stats(device)
    except Exception:  # noqa: BLE001
        return None
    from ..facts.models import MemorySample
    return MemorySample(
        source="memory_stats", line=line, label="torch.cuda.memory_stats() when the exception escaped",
        allocated_bytes=stats.get("allocated_bytes.all.current"),
        max_allocated_bytes=stats.get("allocated_bytes.all.peak"),
        reserved_bytes=stats.get("reserved_bytes.all.current"),
        max_reserved_bytes=stats.get("reserved_bytes.all.peak"),
        device_index=device, pid=os.getpid(),
        alloc_retries=stats.get("num_alloc_retries"), num_ooms=stats.get("num_ooms"),
    )


def diagnose_exception(exc: BaseException, *, knowledge=None, framework: Optional[str] = None):
    """The report for an exception raised in this process (the same pipeline as ``diagnose``)."""
    from ..pipeline import facts_from_view, report_from_facts
    from ..read.reader import LogView

    versions = installed_versions()
    banner = live_lines(exc, versions)
    text_lines = banner + exception_lines(exc)
    view = LogView(pairs=list(enumerate(text_lines, 1)), lines_read=len(text_lines),
                   bytes_read=sum(len(t) + 1 for t in text_lines))
    source = f"{type(exc).__name__} in process {os.getpid()}"
    facts, lines = facts_from_view(view, source)
    _fill_environment(facts.environment, versions, banner_lines=len(banner))
    if not facts.memory_samples:
        sample = _memory_stats_sample(exc, len(text_lines))
        if sample is not None:
            facts.memory_samples.append(sample)
    return report_from_facts(facts, lines, source=source, knowledge=knowledge, framework=framework)


def _expand(path: str) -> str:
    return (path.replace("{rank}", os.environ.get("RANK", "0"))
                .replace("{local_rank}", os.environ.get("LOCAL_RANK", "0"))
                .replace("{pid}", str(os.getpid())))


def _already_reported(exc: BaseException) -> bool:
    """True when an inner ``watch()`` already reported this very exception object.

    Exceptions cannot be weakly referenced, and an ``id()`` is reused as soon as an object
    dies (a caught-and-retried OOM is followed by another at the same address), so the
    mark lives on the exception itself: one attribute, which changes neither its type,
    message, arguments nor traceback.
    """
    if getattr(exc, _MARK, False):
        return True
    try:
        setattr(exc, _MARK, True)
    except (AttributeError, TypeError):
        pass
    return False


class watch:  # noqa: N801 - used like a function: oomdoctor.watch()
    """Context manager and decorator: diagnose an out-of-memory exception as it escapes.

    ``report_path`` (optional) also gets the report as JSON; ``{rank}``, ``{local_rank}``
    and ``{pid}`` in it are filled in, so ranks do not overwrite each other. ``level`` is
    the logging level of the report. The exception always propagates unchanged: the same
    object, with the same traceback. The last report is kept in ``.report``.
    """

    def __init__(self, func: Optional[Callable] = None, *, report_path: Optional[str] = None,
                 level: int = logging.ERROR, kb_dirs: Optional[list] = None, framework: Optional[str] = None,
                 log: Optional[logging.Logger] = None) -> None:
        self.report_path = report_path
        self.level = level
        self.kb_dirs = kb_dirs
        self.framework = framework
        self.log = log or logger
        self.report = None
        self._func = None
        if func is not None:                      # used bare: @oomdoctor.watch
            self._func = func
            functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._func is not None:
            with self:
                return self._func(*args, **kwargs)
        func = args[0] if len(args) == 1 and callable(args[0]) and not kwargs else None
        if func is None:
            raise TypeError("watch(...) used as a decorator takes the function to wrap")

        @functools.wraps(func)
        def wrapper(*a: Any, **kw: Any) -> Any:
            with self:
                return func(*a, **kw)
        return wrapper

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None or self._func is None:     # a bare @watch on a method: bind like a function
            return self
        return functools.partial(self.__call__, obj)

    def __enter__(self) -> "watch":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is not None and is_oom(exc):
            self.handle(exc)
        return False                              # never swallow: the exception goes on as it was

    def handle(self, exc: BaseException) -> None:
        """Diagnose, log and (optionally) write the report; never raises."""
        if _already_reported(exc):
            return
        try:
            kb = None
            if self.kb_dirs:
                from ..kb.knowledge import load_knowledge
                kb = load_knowledge(list(self.kb_dirs))
            report = diagnose_exception(exc, knowledge=kb, framework=self.framework)
            self.report = report
            # the renderers directly: importing the CLI would load click inside a training job
            from ..report.text import render_text
            self.log.log(self.level, "out-of-memory diagnosis (oomdoctor):\n%s", render_text(report, color=False))
            if self.report_path:
                from ..report.json import render_json
                path = _expand(self.report_path)
                directory = os.path.dirname(os.path.abspath(path))
                os.makedirs(directory, exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(render_json(report))
        except Exception as err:  # noqa: BLE001 - the training job's own exception matters more
            self.log.debug("oomdoctor could not diagnose %s: %r", type(exc).__name__, err)


def install_excepthook(**options: Any) -> None:
    """Diagnose an out-of-memory exception that ends the program, then call the previous hook.

    Chains to whatever ``sys.excepthook`` was before (so the traceback is still printed,
    and other hooks still run). Calling it again does nothing. ``options`` are
    ``watch()``'s (``report_path``, ``level``, ``kb_dirs``, ``framework``).
    """
    previous = sys.excepthook
    if getattr(previous, "_oomdoctor_hook", False):
        return
    watcher = watch(**options)

    def hook(exc_type, exc, tb):
        try:
            previous(exc_type, exc, tb)
        finally:
            if exc is not None and is_oom(exc):
                watcher.handle(exc)

    hook._oomdoctor_hook = True  # type: ignore[attr-defined]
    hook._oomdoctor_previous = previous  # type: ignore[attr-defined]
    sys.excepthook = hook


class _CallableModule(type(sys)):
    """``import oomdoctor.watch`` binds ``oomdoctor.watch`` to this module; keep it callable,
    so ``oomdoctor.watch()`` works whichever import ran first."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
