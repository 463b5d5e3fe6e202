"""Protobuf and gRPC code generation with Debian's protoc and plugins.

Bazel 4's native proto rules would fetch protobuf's sources; these macros call
the system `protoc` (protobuf-compiler) and `grpc_cpp_plugin` /
`grpc_python_plugin` (protobuf-compiler-grpc) from a genrule instead.
"""

def _base(src):
    return src[:-len(".proto")]

def cc_proto_library_system(name, src, deps = [], imports = [], grpc = False, visibility = None):
    """C++ messages (and, with grpc = True, service stubs) for one .proto.

    Args:
      name: the cc_library target.
      src: the .proto file in this package.
      deps: cc_proto_library_system targets of the protos `src` imports.
      imports: the imported .proto files (labels), inputs to protoc.
      grpc: also generate gRPC service code.
      visibility: of the cc_library.
    """
    pkg = native.package_name()
    base = _base(src)
    outs = [base + ".pb.h", base + ".pb.cc"]
    cmd = "protoc -I. --cpp_out=$(GENDIR) "
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        cmd += ("--grpc_out=$(GENDIR) " +
                "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) ")
    cmd += pkg + "/" + src
    native.genrule(
        name = name + "_gen",
        srcs = [src] + imports,
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc++"] if grpc else []),
        visibility = visibility,
    )

def py_grpc_sources(name, srcs, visibility = None):
    """Python messages and gRPC stubs (`*_pb2.py`, `*_pb2_grpc.py`) for srcs.

    The files keep the proto paths (proto/inference_pb2.py), so a script that
    puts the runfiles root on sys.path imports them as `proto.inference_pb2`.
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        outs += [_base(src) + "_pb2.py", _base(src) + "_pb2_grpc.py"]
    native.genrule(
        name = name,
        srcs = srcs,
        outs = outs,
        cmd = ("protoc -I. --python_out=$(GENDIR) --grpc_out=$(GENDIR) " +
               "--plugin=protoc-gen-grpc=$$(command -v grpc_python_plugin) " +
               " ".join([pkg + "/" + s for s in srcs])),
        visibility = visibility,
    )
