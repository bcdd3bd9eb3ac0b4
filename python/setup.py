"""Builds steptrace's Python package: the _steptrace extension through CMake (python/CMakeLists.txt).
`pip install --no-build-isolation ./python` (setuptools, CMake, a C++17 compiler, the CUDA toolkit
and spdlog as for the C++ library, pybind11). STEPTRACE_CMAKE_ARGS adds arguments to the configure."""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        tmp = os.path.abspath(self.build_temp)
        os.makedirs(tmp, exist_ok=True)
        args = ["cmake", "-S", HERE, "-B", tmp, f"-DPython_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out}"]
        args += shlex.split(os.environ.get("STEPTRACE_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", tmp, "--target", "_steptrace", "-j", str(os.cpu_count() or 1)], check=True)


setup(
    name="steptrace",
    version="0.1.0",
    description="Per-step GPU time attribution for training programs (Python bindings of the C++ header)",
    packages=["steptrace"],
    ext_modules=[Extension("steptrace._steptrace", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.8",
    zip_safe=False,
)
