"""The shape most daemon tests share."""

def bert_daemon_test(name, size = "small"):
    """A test script `<name>.py` run as `<name>.py CASTSERVE BERT_CONFIG`:
    the daemon binary and the BERT fixture's folder (by its config.json)."""
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".py"],
        args = [
            "$(location //server:castserve)",
            "$(location //models:testdata/bert/config.json)",
        ],
        data = [
            "daemon_testlib.py",
            "//models:testdata/bert/config.json",
            "//models:testdata/bert/model.safetensors",
            "//models:testdata/bert/reference.safetensors",
            "//proto:py_grpc",
            "//server:castserve",
        ],
    )
