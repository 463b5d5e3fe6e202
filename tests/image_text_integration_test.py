#!/usr/bin/python3
"""The full CLIP and SigLIP models served by the daemon over REST.

The committed fixtures (tools/gen_clip_fixtures.py: random CLIPModel and
SiglipModel folders written by transformers 5, with a small tokenizer.json)
served from a temporary repository as "clip" and "siglip". Over plain HTTP
(urllib, as curl sends it):
  - text in (BYTES "text") -> text_embeds equal transformers'
    get_text_features of the tokenizer's ids (1e-4 relative), for SigLIP
    too, whose reference ran on texts padded to max_length; a text longer
    than the position table as transformers truncates it;
  - images as JSON FP32 -> image_embeds equal get_image_features;
  - token ids or text, and images, in one request -> both outputs; images
    alone -> image_embeds only;
  - the README's curl examples for the two models answer as their
    references say;
  - the metadata lists the inputs; text beside token ids, or beside images
    of another batch size, is refused naming why.

Run by Bazel as:
  image_text_integration_test.py CASTSERVE CLIP_CONFIG SIGLIP_CONFIG README
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import Daemon, read_safetensors, write_file  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
FIXTURES = {"clip": os.path.dirname(os.path.abspath(sys.argv[2])),
            "siglip": os.path.dirname(os.path.abspath(sys.argv[3]))}
README = os.path.abspath(sys.argv[4])
TIMEOUT_SECONDS = 60
TOLERANCE = 1e-4

CONFIG = """max_batch_size: 8
checkpoint { path: "hf" }
load_policy: LOAD_POLICY_STARTUP
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""


def relative_error(got, expected):
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


class ImageTextTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.repository = tempfile.mkdtemp(prefix="castserve-image-text-")
        cls.references = {}
        for name, folder in FIXTURES.items():
            write_file(os.path.join(cls.repository, name, "config.pbtxt"),
                       CONFIG)
            os.symlink(os.path.realpath(folder),
                       os.path.join(cls.repository, name, "hf"))
            path = os.path.join(folder, "reference.safetensors")
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                metadata = json.loads(f.read(size))["__metadata__"]
            cls.references[name] = (read_safetensors(path),
                                    json.loads(metadata["texts"]))
            cls.long_texts = getattr(cls, "long_texts", {})
            cls.long_texts[name] = metadata["long_text"]
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0", "--bind-address=127.0.0.1",
                            "--allow-symlinks-outside-repository").wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    def call(self, path, body=None):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.daemon.http_port}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request,
                                        timeout=TIMEOUT_SECONDS) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def infer(self, model, inputs):
        status, answer = self.call(f"/v2/models/{model}/infer",
                                   {"inputs": inputs})
        self.assertEqual(status, 200, answer)
        return {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                for o in answer["outputs"]}

    @staticmethod
    def tensor(name, array):
        datatype = "INT64" if array.dtype == np.int64 else "FP32"
        return {"name": name, "datatype": datatype, "shape": list(array.shape),
                "data": array.flatten().tolist()}

    def test_text_in_gives_get_text_features(self):
        for model, (reference, texts) in self.references.items():
            outputs = self.infer(model, [{
                "name": "text", "datatype": "BYTES", "shape": [len(texts), 1],
                "data": texts}])
            self.assertEqual(list(outputs), ["text_embeds"], model)
            self.assertLessEqual(
                relative_error(outputs["text_embeds"],
                               reference["output.text_embeds"]), TOLERANCE,
                model)

    def test_long_text_is_truncated_keeping_its_end_token(self):
        for model, (reference, _) in self.references.items():
            outputs = self.infer(model, [{
                "name": "text", "datatype": "BYTES", "shape": [1, 1],
                "data": [self.long_texts[model]]}])
            self.assertLessEqual(
                relative_error(outputs["text_embeds"],
                               reference["long.output.text_embeds"]),
                TOLERANCE, model)

    def test_images_alone_and_with_token_ids(self):
        for model, (reference, _) in self.references.items():
            pixels = reference["input.pixel_values"]
            outputs = self.infer(model, [self.tensor("pixel_values", pixels)])
            self.assertEqual(list(outputs), ["image_embeds"], model)
            self.assertLessEqual(
                relative_error(outputs["image_embeds"],
                               reference["output.image_embeds"]), TOLERANCE)
            inputs = [self.tensor("pixel_values", pixels)]
            for name in ("input_ids", "attention_mask"):
                if "input." + name in reference:
                    inputs.append(self.tensor(name, reference["input." + name]))
            outputs = self.infer(model, inputs)
            self.assertEqual(sorted(outputs), ["image_embeds", "text_embeds"])
            for name in outputs:
                self.assertLessEqual(
                    relative_error(outputs[name], reference["output." + name]),
                    TOLERANCE, f"{model} {name}")

    def test_metadata_and_refusals(self):
        status, metadata = self.call("/v2/models/clip")
        self.assertEqual(status, 200, metadata)
        self.assertEqual(
            sorted(i["name"] for i in metadata["inputs"]),
            ["attention_mask", "input_ids", "pixel_values", "text"])
        self.assertEqual(sorted(o["name"] for o in metadata["outputs"]),
                         ["image_embeds", "text_embeds"])
        reference, texts = self.references["clip"]
        status, answer = self.call("/v2/models/clip/infer", {"inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [1, 1],
             "data": texts[:1]},
            self.tensor("input_ids", reference["input.input_ids"][:1])]})
        self.assertEqual(status, 400, answer)
        self.assertIn("either text or the token inputs", answer["error"])
        status, answer = self.call("/v2/models/clip/infer", {"inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [1, 1],
             "data": texts[:1]},
            self.tensor("pixel_values", reference["input.pixel_values"])]})
        self.assertEqual(status, 400, answer)
        self.assertIn("have 1 and 3 batch elements", answer["error"])

    def test_text_and_images_in_one_request(self):
        for model, (reference, texts) in self.references.items():
            outputs = self.infer(model, [
                self.tensor("pixel_values", reference["input.pixel_values"]),
                {"name": "text", "datatype": "BYTES", "shape": [len(texts), 1],
                 "data": texts}])
            self.assertEqual(sorted(outputs), ["image_embeds", "text_embeds"])
            for name in outputs:
                self.assertLessEqual(
                    relative_error(outputs[name], reference["output." + name]),
                    TOLERANCE, f"{model} {name}")

    def readme_example(self, model, marker):
        """The README's ```sh block that posts to `model` and holds
        `marker`, run against the daemon; its parsed JSON answer."""
        with open(README) as f:
            blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
        block = next(b for b in blocks
                     if f"/v2/models/{model}/infer" in b and marker in b)
        command = block.replace("localhost:8000",
                                f"127.0.0.1:{self.daemon.http_port}")
        result = subprocess.run(["bash", "-ec", command], capture_output=True,
                                text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        return block, json.loads(result.stdout)

    def test_readme_examples(self):
        reference, texts = self.references["clip"]
        block, answer = self.readme_example("clip", '"name": "text"')
        (output,) = answer["outputs"]
        self.assertEqual(output["name"], "text_embeds")
        (text,) = re.findall(r'"data": \["(.*?)"\]', block)
        expected = reference["output.text_embeds"][texts.index(text)]
        self.assertLessEqual(
            relative_error(np.array(output["data"], np.float32), expected),
            TOLERANCE)
        _, answer = self.readme_example("siglip", "pixel_values")
        (output,) = answer["outputs"]
        self.assertEqual(output["name"], "image_embeds")
        self.assertEqual(output["shape"], [1, 32])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
