"""isotope's version, read from the installed package's metadata (pyproject.toml is the
one place it is written). A module of its own so that any module can import it without
importing the package's ``__init__`` (which imports them)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("isotopedb")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"
