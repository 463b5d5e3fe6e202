"""Repository rule that wraps a LibTorch installation as @libtorch//:libtorch.

By default it uses Debian's libtorch-dev (LibTorch 1.13.1, CPU only): headers in
/usr/include, libraries on the default linker path. Setting the environment
variable LIBTORCH to the root of an unpacked LibTorch distribution (the folder
holding include/ and lib/, for example a LibTorch 2.x CUDA build) selects that
one instead; Bazel re-runs this rule when LIBTORCH changes.
"""

_DEBIAN_API_INCLUDE = "/usr/include/torch/csrc/api/include"

_BUILD_DEBIAN = """
package(default_visibility = ["//visibility:public"])

# Debian installs ATen/c10/torch headers into /usr/include, which the compiler
# searches already; only the C++ frontend's include root needs adding.
cc_library(
    name = "libtorch",
    hdrs = glob(["api_include/**/*.h"]),
    includes = ["api_include"],
    linkopts = ["-ltorch", "-ltorch_cpu", "-lc10"],
)

"""

_BUILD_CUSTOM = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        # torch_cuda registers its kernels from static initializers: keep it
        # linked even though nothing references it by name.
        "-Wl,--no-as-needed",
    ] + {cuda_libs} + [
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
        "-Wl,--as-needed",
    ],
)
"""

def _libtorch_repository_impl(ctx):
    root = ctx.os.environ.get("LIBTORCH", "")
    if not root:
        ctx.symlink(_DEBIAN_API_INCLUDE, "api_include")
        ctx.file("BUILD", _BUILD_DEBIAN.format())
        return
    if not ctx.path(root + "/include/torch").exists:
        fail("LIBTORCH=%s does not look like a LibTorch root (no include/torch)" % root)
    ctx.symlink(root + "/include", "include")
    cuda_libs = []
    if ctx.path(root + "/lib/libtorch_cuda.so").exists:
        cuda_libs = ["-ltorch_cuda", "-lc10_cuda"]
    ctx.file("BUILD", _BUILD_CUSTOM.format(
        lib = root + "/lib",
        cuda_libs = repr(cuda_libs),
    ))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH"],
    local = True,
)
