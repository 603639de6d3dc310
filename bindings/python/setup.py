"""Builds the extension conch._conch for `pip install ./bindings/python`.

libconch (and the conch executable that url=None starts) come from the
checkout this directory sits in: CMake builds conch_static and conch_cli
in the build directory (offline; Debian's -dev packages, as for the C
build), the extension links libconch.a, and the executable is shipped in
the package (conch/bin/conch).  Without the checkout around it, an
installed libconch is used through pkg-config (conch.pc) and `conch` is
looked up at run time (CONCH_SERVE_EXE, PATH)."""

import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
DEPS = ["libnghttp2", "libprotobuf-c", "jansson", "libbrotlienc",
        "libbrotlidec", "libzstd", "snappy", "openssl", "zlib"]


def pkg_config(*args):
    return subprocess.check_output(["pkg-config", *args], text=True).split()


def in_checkout():
    try:
        with open(os.path.join(TOP, "CMakeLists.txt")) as f:
            return "project(conch" in f.read()
    except OSError:
        return False


class BuildExt(build_ext):
    def build_extension(self, ext):
        if in_checkout():
            self.from_checkout(ext)
        else:
            ext.extra_compile_args += pkg_config("--cflags", "conch")
            ext.extra_link_args += pkg_config("--libs", "conch")
        super().build_extension(ext)

    def from_checkout(self, ext):
        cm = os.path.join(os.path.abspath(self.build_temp), "libconch")
        subprocess.check_call([
            "cmake", "-S", TOP, "-B", cm, "-DCMAKE_BUILD_TYPE=Release",
            "-DCONCH_BUILD_SHARED=OFF", "-DCONCH_BUILD_TESTS=OFF",
            "-DCONCH_BUILD_EXAMPLES=OFF", "-DCONCH_BUILD_PYTHON=OFF",
            "-DCONCH_INSTALL=OFF", "-DCONCH_WERROR=OFF"])
        subprocess.check_call(["cmake", "--build", cm, "-j",
                               str(os.cpu_count() or 2), "--target",
                               "conch_static", "conch_cli"])
        # conch/features.h is made by the build (the CONCH_WITH_* options).
        ext.include_dirs += [os.path.join(cm, "runtime", "include"),
                             os.path.join(TOP, "runtime", "include"),
                             os.path.join(TOP, "api", "include"),
                             os.path.join(TOP, "gen")]
        ext.extra_objects.append(os.path.join(cm, "runtime", "libconch.a"))
        ext.extra_link_args += pkg_config("--libs", *DEPS) + \
            ["-lhttp_parser", "-lpthread"]
        # The conch executable, shipped with the package for url=None.
        pkg = os.path.join(os.path.abspath(self.build_lib), "conch")
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(cm, "tools", "conch", "conch"),
                     os.path.join(pkg, "bin", "conch"))
        with open(os.path.join(pkg, "_build.py"), "w") as f:
            f.write("# Written by setup.py: the conch executable shipped "
                    "with the package.\nimport os\nSERVE_EXE = os.path.join("
                    "os.path.dirname(__file__), 'bin', 'conch')\n")


setup(
    ext_modules=[Extension("conch._conch", ["src/_conch.c"],
                           extra_compile_args=["-fvisibility=hidden"])],
    cmdclass={"build_ext": BuildExt},
)
