"""Records, at build time, the libdir where pkg-config finds librdzv
(`pkg-config --variable=libdir rdzv`), so that `import rdzv` needs no
environment variable later. Everything else is in pyproject.toml."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py


def s_libdir():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "rdzv"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


class BuildPy(build_py):
    def run(self):
        super().run()
        libdir = s_libdir()
        path = os.path.join(self.build_lib, "rdzv", "_build_config.py")
        with open(path, "w") as f:
            f.write("# Written by setup.py when the package was built.\n")
            f.write("LIBDIR = %r\n" % libdir)


setup(cmdclass={"build_py": BuildPy})
