"""Records, at build time, the libdir where pkg-config finds librdzv
(`pkg-config --variable=libdir rdzv`), so that `import rdzv` needs no
environment variable later. Everything else is in pyproject.toml."""
import importlib.util
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py


def s_library():
    """The package's own rdzv/_library.py (its question to pkg-config, and
    what to do when the answer is none), loaded by path: the package is not
    importable before it is built."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_rdzv_library",
                                                  os.path.join(here, "rdzv", "_library.py"))
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    return lib


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = s_library()
        libdir = lib.pkg_config_libdir()
        if libdir is None:
            # Said at install, not first at `rdzv.Client()` in some later
            # process. The install still succeeds: librdzv may come from
            # RDZV_LIBRARY or the loader's own search where the package runs.
            sys.stderr.write("WARNING: rdzv: `pkg-config --variable=libdir rdzv` found no "
                             "librdzv, so this package records no place to load it from. "
                             + lib.HOW_TO_FIND + "\n")
        path = os.path.join(self.build_lib, "rdzv", "_build_config.py")
        with open(path, "w") as f:
            f.write("# Written by setup.py when the package was built.\n")
            f.write("LIBDIR = %r\n" % libdir)


setup(cmdclass={"build_py": BuildPy})
