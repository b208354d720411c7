"""Records, at build time, the libdir where pkg-config finds librdzv
(`pkg-config --variable=libdir rdzv`), so that `import rdzv` needs no
environment variable later. Everything else is in pyproject.toml."""
import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py


def s_libdir():
    """The package's own question to pkg-config (rdzv/_library.py), loaded
    by path: the package is not importable before it is built."""
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_rdzv_library",
                                                  os.path.join(here, "rdzv", "_library.py"))
    lib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lib)
    return lib.pkg_config_libdir()


class BuildPy(build_py):
    def run(self):
        super().run()
        libdir = s_libdir()
        path = os.path.join(self.build_lib, "rdzv", "_build_config.py")
        with open(path, "w") as f:
            f.write("# Written by setup.py when the package was built.\n")
            f.write("LIBDIR = %r\n" % libdir)


setup(cmdclass={"build_py": BuildPy})
