"""Repository rule that wraps a LibTorch installation as @libtorch//:libtorch.

By default it uses LibTorch 2.11.0+cu130, the C++ distribution inside PyPI's
torch wheel, unpacked by tools/fetch_libtorch.sh into
$CASTSERVE_CACHE/libtorch-2.11.0/torch (CASTSERVE_CACHE defaults to
~/.cache/castserve). Setting LIBTORCH to the root of another LibTorch (the
folder holding include/ and lib/) selects that one instead. Bazel re-runs this
rule when either variable changes.

`libtorch` links only libtorch_cpu and libc10: the CPU build runs on machines
without a GPU (libtorch_cpu needs libcudart.so.13 and libcupti.so.13 at load
time, which the fetch script unpacks where the wheel's RPATH looks for them).
`libtorch_cuda` adds libtorch_cuda and libc10_cuda (`--config=cuda` selects it
through //third_party:libtorch); their CUDA runtime libraries come from
`tools/fetch_libtorch.sh --cuda`, found through the wheel's own RPATH. They are
linked with --no-as-needed: the CUDA kernels register themselves from static
initializers, which a linker dropping "unused" libraries would lose.
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.cuh"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-ltorch_cpu",
        "-lc10",
    ],
)

cc_library(
    name = "libtorch_cuda",
    linkopts = [
        "-Wl,--no-as-needed",
        "-ltorch_cuda",
        "-lc10_cuda",
        "-Wl,--as-needed",
    ],
    deps = [":libtorch"],
)
"""

def _default_root(ctx):
    cache = ctx.os.environ.get("CASTSERVE_CACHE", "")
    if not cache:
        cache = ctx.os.environ.get("HOME", "/root") + "/.cache/castserve"
    return cache + "/libtorch-2.11.0/torch"

def _libtorch_repository_impl(ctx):
    root = ctx.os.environ.get("LIBTORCH", "") or _default_root(ctx)
    if not ctx.path(root + "/include/torch").exists:
        fail(("no LibTorch at %s (no include/torch): run tools/fetch_libtorch.sh " +
              "(tools/install_deps.sh calls it), or set LIBTORCH to a LibTorch root") % root)
    # The distribution carries its own (older) protobuf headers under
    # include/google; they would shadow Debian's, which gRPC is built with.
    for entry in ctx.path(root + "/include").readdir():
        if entry.basename != "google":
            ctx.symlink(entry, "include/" + entry.basename)
    ctx.file("BUILD", _BUILD.format(lib = root + "/lib"))

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH", "CASTSERVE_CACHE", "HOME"],
    local = True,
)
