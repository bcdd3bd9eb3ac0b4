"""Builds steptrace's Python package: the _steptrace extension through CMake (python/CMakeLists.txt).
`pip install --no-build-isolation ./python` (setuptools, CMake, a C++17 compiler, the CUDA toolkit
and spdlog as for the C++ library, pybind11). STEPTRACE_CMAKE_ARGS adds arguments to the configure.
The package's pure-Python tools come with it: steptrace.report (`steptrace-report`, `python -m steptrace
report`) and steptrace.ctl (`steptrace-ctl`, `python -m steptrace ctl`)."""
import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

# The commands pip runs to build: its metadata step (dist_info, through setuptools' build_meta) comes
# first and already needs bdist_wheel on setuptools before 70.1, so the tools are checked there.
BUILD_COMMANDS = ("dist_info", "egg_info", "bdist_wheel", "editable_wheel", "build_ext", "install", "develop")


def require_build_tools():
    """What the build needs, each said by name when missing (pip's own message would be "invalid command
    'bdist_wheel'" or a CMake error)."""
    import shutil
    missing = []
    if shutil.which("cmake") is None:
        missing.append("CMake (apt-get install cmake, or pip install cmake)")
    if any(c in sys.argv for c in ("dist_info", "bdist_wheel", "editable_wheel")):
        try:
            import wheel  # noqa: F401  setuptools before 70.1 builds wheels through it
        except ImportError:
            try:
                from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
            except ImportError:
                missing.append("the wheel package (apt-get install python3-wheel, or pip install wheel)")
    # pybind11 is looked for by CMake (python/CMakeLists.txt: Debian's package, the pybind11 module, or
    # PyTorch's headers), which names it when it finds none.
    if missing:
        sys.exit("steptrace: building the Python package needs " + "; ".join(missing))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        require_build_tools()
        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        tmp = os.path.abspath(self.build_temp)
        os.makedirs(tmp, exist_ok=True)
        args = ["cmake", "-S", HERE, "-B", tmp, f"-DPython_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out}"]
        args += shlex.split(os.environ.get("STEPTRACE_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", tmp, "--target", "_steptrace", "-j", str(os.cpu_count() or 1)], check=True)


if any(c in sys.argv for c in BUILD_COMMANDS):
    require_build_tools()

setup(
    name="steptrace",
    version="0.1.0",
    description="Per-step GPU time attribution for training programs (Python bindings of the C++ header)",
    packages=["steptrace", "steptrace.report"],
    package_data={"steptrace": ["schema.json"]},  # the line's declaration as data (steptrace.schema)
    ext_modules=[Extension("steptrace._steptrace", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["steptrace-report=steptrace.report:main", "steptrace-ctl=steptrace.ctl:main"]},
    python_requires=">=3.8",
    zip_safe=False,
)
