"""Reads a running castserve's repository index with the unmodified
tritonclient package, over gRPC and over HTTP.

  python tritonclient_index_check.py GRPC_HOST:PORT HTTP_HOST:PORT

Prints one JSON object {"grpc": [...], "http": [...]}, each a list of
{"name", "state", "reason"} as the client decoded them; exits non-zero when
either client fails to read the index. Run by
broken_checkpoints_integration_test.py with an interpreter that has
tritonclient[grpc,http] (PyPI).
"""

import json
import sys

import tritonclient.grpc as grpc_client
import tritonclient.http as http_client


def main():
    grpc_address, http_address = sys.argv[1:3]
    grpc_index = grpc_client.InferenceServerClient(grpc_address) \
        .get_model_repository_index(as_json=True)
    http_index = http_client.InferenceServerClient(http_address) \
        .get_model_repository_index()
    print(json.dumps({
        "grpc": [{"name": m.get("name", ""), "state": m.get("state", ""),
                  "reason": m.get("reason", "")}
                 for m in grpc_index.get("models", [])],
        "http": [{"name": m.get("name", ""), "state": m.get("state", ""),
                  "reason": m.get("reason", "")} for m in http_index],
    }))


if __name__ == "__main__":
    main()
