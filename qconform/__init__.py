"""qconform: conformance kit for sampled-draft ("q") speculative decoding."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("qconform")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
