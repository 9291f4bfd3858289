"""The build step that puts tinyops' Warp modules, built ahead of time, inside the package.

setuptools runs ``build_py`` when it builds a wheel; after copying the sources into the build folder,
this one imports the ops from there and has ``interop.precompile`` write their modules into
``tinyops/_warp_modules`` next to them, so the wheel carries them. ``TINYOPS_CUDA_ARCHS`` (e.g.
``80,90``; empty for the CPU only) picks the GPU architectures.
"""

import importlib
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithWarpModules(build_py):
    def run(self):
        super().run()
        sys.path.insert(0, os.path.abspath(self.build_lib))  # the package as it will be installed
        import interop

        ops = importlib.import_module("tinyops.ops")
        archs = [int(a) for a in os.environ.get("TINYOPS_CUDA_ARCHS", "80,90").split(",") if a.strip()]
        interop.precompile(ops, Path(self.build_lib) / "tinyops" / "_warp_modules", cuda_archs=archs)


setup(cmdclass={"build_py": BuildWithWarpModules})
