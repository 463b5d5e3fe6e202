#!/usr/bin/python3
"""The OpenAI API (/v1) driven by the official `openai` Python package.

The default repository's minilm (real all-MiniLM-L6-v2; tools/fetch_minilm.sh)
and tiny_llama (random weights, a committed ChatML chat_template.jinja) are
served from a temporary repository. Through the unmodified `openai` client:
the model list; embeddings of a string, a list, token ids, base64 and
dimensions, equal to the KServe REST sentence_embedding of the same text and
to sentence-transformers' reference; completions greedy (temperature 0) equal
to transformers' tokens (tests/testdata/tiny_llama_greedy.json), unary and
streamed, with usage; chat completions equal to a completion of the prompt
the template renders, tokenised by Hugging Face `tokenizers` (the reference
tokenizer); n choices; stop strings; closing a stream frees the KV cache
(castserve_kv_cache_bytes on /metrics); logprobs (completions' and chat's,
unary and streamed) equal to transformers' log_softmax of tiny_llama's raw
logits, and presence / frequency penalties change greedy output exactly as
the reference computed in Python says (tests/testdata/tiny_llama_logprobs.json,
tools/gen_logprob_references.py); bad requests are 400 with OpenAI's
error shape naming the field; tokens and scopes are 401 / 403.

The client checks need `openai` and `tokenizers` (tools/test_all.sh installs
them, pinned, into .venv and passes that Python as $TRITON_PYTHON); the
script re-runs itself under $TRITON_PYTHON when this Python lacks them.

Run by Bazel as:
  openai_integration_test.py CASTSERVE TINY_CONFIG GREEDY_REFERENCE
      MINILM_CONFIG MINILM_SENTENCES LOGPROBS_REFERENCE
"""

import os
import sys

try:
    import openai
    import tokenizers
except ImportError:
    PYTHON = os.environ.get("TRITON_PYTHON", "")
    if PYTHON and os.environ.get("CASTSERVE_OPENAI_REEXEC") != "1":
        os.environ["CASTSERVE_OPENAI_REEXEC"] = "1"
        os.execv(PYTHON, [PYTHON] + sys.argv)
    raise AssertionError(
        "the openai and tokenizers packages are not installed: run "
        "tools/test_all.sh (it installs them into .venv) or set "
        "TRITON_PYTHON to a Python that has them")

import base64  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402
import urllib.request  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_testlib import Daemon, read_safetensors, write_file  # noqa: E402

CASTSERVE = os.path.abspath(sys.argv[1])
TINY_CONFIG = os.path.abspath(sys.argv[2])
REFERENCE = os.path.abspath(sys.argv[3])
MINILM_CONFIG = os.path.abspath(sys.argv[4])
MINILM_DIR = os.path.dirname(os.path.abspath(sys.argv[5]))
WEIGHTS = os.path.join(MINILM_DIR, "weights")
LOGPROBS_REFERENCE = os.path.abspath(sys.argv[6])
LOGPROB_TOLERANCE = 1e-4
LLAMA = "tiny_llama"
MINILM = "minilm"
INFER_TOKEN = "openai-infer-token-0123456789"
ADMIN_TOKEN = "openai-admin-token-0123456789"
METRICS_TOKEN = "openai-metrics-token-0123456789"
TIMEOUT_SECONDS = 60


def chatml(messages):
    """What tiny_llama's chat_template.jinja renders (add_generation_prompt)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                   for m in messages) + "<|im_start|>assistant\n"


class OpenAiTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(WEIGHTS, "model.safetensors")):
            raise AssertionError(f"{WEIGHTS} is missing: run "
                                 "tools/fetch_minilm.sh (tools/test_all.sh "
                                 "does)")
        with open(REFERENCE, encoding="utf-8") as f:
            cls.reference = json.load(f)
        with open(LOGPROBS_REFERENCE, encoding="utf-8") as f:
            cls.logprobs_reference = json.load(f)
        cls.repository = tempfile.mkdtemp(prefix="castserve-openai-")
        shutil.copytree(os.path.dirname(TINY_CONFIG),
                        os.path.join(cls.repository, LLAMA))
        with open(MINILM_CONFIG) as f:
            write_file(os.path.join(cls.repository, MINILM, "config.pbtxt"),
                       f.read())
        os.symlink(os.path.realpath(WEIGHTS),
                   os.path.join(cls.repository, MINILM, "hf"))
        cls.tokens = os.path.join(cls.repository, "tokens")
        write_file(cls.tokens, f"{INFER_TOKEN} infer\n{ADMIN_TOKEN} admin\n"
                   f"{METRICS_TOKEN} metrics\n")
        cls.daemon = Daemon(CASTSERVE, f"--model-repository={cls.repository}",
                            "--grpc-port=0", "--metrics-port=0",
                            "--http-port=0", "--bind-address=127.0.0.1",
                            f"--auth-token-file={cls.tokens}",
                            "--allow-symlinks-outside-repository").wait_ready()
        cls.base_url = f"http://127.0.0.1:{cls.daemon.http_port}/v1"
        cls.client = openai.OpenAI(base_url=cls.base_url, api_key=INFER_TOKEN,
                                   timeout=TIMEOUT_SECONDS, max_retries=0)
        cls.tokenizer = tokenizers.Tokenizer.from_file(os.path.join(
            os.path.dirname(TINY_CONFIG), "hf", "tokenizer.json"))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.kill()
        shutil.rmtree(cls.repository)

    # --- helpers ----------------------------------------------------------

    def kserve_embedding(self, text):
        body = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES",
                                       "shape": [1, 1], "data": [text]}],
                           "outputs": [{"name": "sentence_embedding"}]})
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.daemon.http_port}/v2/models/{MINILM}"
            "/infer", data=body.encode(),
            headers={"Authorization": f"Bearer {INFER_TOKEN}"})
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as r:
            answer = json.load(r)
        return np.asarray(answer["outputs"][0]["data"], np.float32)

    def metrics(self):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.daemon.metrics_port}/metrics",
            headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read().decode()

    def kv_cache_bytes(self):
        match = re.search(r'^castserve_kv_cache_bytes\{[^}]*model="tiny_llama"'
                          r'[^}]*\} (\S+)$', self.metrics(), re.MULTILINE)
        self.assertIsNotNone(match, "no castserve_kv_cache_bytes")
        return float(match.group(1))

    def greedy(self, **extra):
        return dict(model=LLAMA, temperature=0, **extra)

    # --- models -----------------------------------------------------------

    def test_models_list_and_retrieve(self):
        ids = sorted(m.id for m in self.client.models.list())
        self.assertEqual(ids, [MINILM, LLAMA])
        model = self.client.models.retrieve(LLAMA)
        self.assertEqual(model.id, LLAMA)
        self.assertEqual(model.owned_by, "castserve")
        self.assertGreater(model.created, 1700000000)
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("ghost")

    # --- embeddings -------------------------------------------------------

    def test_embeddings_equal_kserve_and_sentence_transformers(self):
        with open(os.path.join(MINILM_DIR, "sentences.json"),
                  encoding="utf-8") as f:
            sentences = [row["text"] for row in json.load(f)]
        expected = read_safetensors(os.path.join(
            MINILM_DIR, "sentence_embeddings.safetensors"))[
                "sentence_embedding"]
        picks = [0, 30, 76, 100, len(sentences) - 5]
        answer = self.client.embeddings.create(
            model=MINILM, input=[sentences[i] for i in picks])
        self.assertEqual(len(answer.data), len(picks))
        total_tokens = 0
        for row, i in zip(answer.data, picks):
            got = np.asarray(row.embedding, np.float32)
            self.assertEqual(got.shape, (384,))
            np.testing.assert_allclose(got, self.kserve_embedding(sentences[i]),
                                       atol=1e-6)
            cosine = float(np.dot(got, expected[i]) / (
                np.linalg.norm(got) * np.linalg.norm(expected[i])))
            self.assertGreaterEqual(cosine, 0.995)
            total_tokens += len(self.tokenizer_of_minilm().encode(
                sentences[i]).ids)
        self.assertEqual(answer.usage.prompt_tokens, total_tokens)
        one = self.client.embeddings.create(model=MINILM, input=sentences[0])
        self.assertEqual(len(one.data), 1)
        np.testing.assert_allclose(one.data[0].embedding,
                                   answer.data[0].embedding, atol=1e-6)

    def tokenizer_of_minilm(self):
        """minilm's tokenizer.json pads and truncates at 128; castserve pads
        nothing and truncates at sentence-transformers' max_seq_length."""
        tokenizer = tokenizers.Tokenizer.from_file(
            os.path.join(WEIGHTS, "tokenizer.json"))
        tokenizer.no_padding()
        with open(os.path.join(WEIGHTS, "sentence_bert_config.json")) as f:
            tokenizer.enable_truncation(json.load(f)["max_seq_length"])
        return tokenizer

    def test_embeddings_tokens_base64_and_dimensions(self):
        text = "A man is playing a guitar."
        ids = self.tokenizer_of_minilm().encode(text).ids
        by_text = self.client.embeddings.create(model=MINILM, input=text)
        by_ids = self.client.embeddings.create(model=MINILM, input=[ids])
        np.testing.assert_allclose(by_ids.data[0].embedding,
                                   by_text.data[0].embedding, atol=1e-6)
        self.assertEqual(by_ids.usage.prompt_tokens, len(ids))
        # The client asks for base64 when the caller asks for floats and
        # decodes it itself; ask for it explicitly to see the wire form.
        raw = self.client.embeddings.with_raw_response.create(
            model=MINILM, input=text, encoding_format="base64")
        encoded = json.loads(raw.text)["data"][0]["embedding"]
        decoded = np.frombuffer(base64.b64decode(encoded), "<f4")
        np.testing.assert_array_equal(decoded,
                                      np.asarray(by_text.data[0].embedding,
                                                 np.float32))
        short = self.client.embeddings.create(model=MINILM, input=text,
                                              dimensions=64)
        got = np.asarray(short.data[0].embedding)
        self.assertEqual(got.shape, (64,))
        full = np.asarray(by_text.data[0].embedding, np.float64)[:64]
        np.testing.assert_allclose(got, full / np.linalg.norm(full),
                                   atol=1e-6)
        self.assertAlmostEqual(float(np.linalg.norm(got)), 1.0, places=5)

    # --- completions ------------------------------------------------------

    def test_completion_greedy_equals_transformers(self):
        answer = self.client.completions.create(
            prompt=self.reference["prompt"],
            max_tokens=self.reference["max_tokens"], **self.greedy())
        self.assertEqual(answer.object, "text_completion")
        self.assertEqual(answer.choices[0].text, self.reference["text_output"])
        self.assertEqual(answer.choices[0].finish_reason, "length")
        self.assertEqual(answer.usage.prompt_tokens,
                         len(self.reference["prompt_ids"]))
        self.assertEqual(answer.usage.completion_tokens,
                         self.reference["max_tokens"])
        by_ids = self.client.completions.create(
            prompt=self.reference["prompt_ids"],
            max_tokens=self.reference["max_tokens"], **self.greedy())
        self.assertEqual(by_ids.choices[0].text, self.reference["text_output"])

    def test_completion_stream_equals_unary(self):
        stream = self.client.completions.create(
            prompt=self.reference["prompt"],
            max_tokens=self.reference["max_tokens"], stream=True,
            stream_options={"include_usage": True}, **self.greedy())
        text, finish, usage = "", None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.text
                finish = choice.finish_reason or finish
        self.assertEqual(text, self.reference["text_output"])
        self.assertEqual(finish, "length")
        self.assertEqual(usage.completion_tokens, self.reference["max_tokens"])
        self.assertEqual(usage.prompt_tokens, len(self.reference["prompt_ids"]))

    def test_stop_string_and_n_choices(self):
        full = self.reference["text_output"]
        stop = full[10:14]
        answer = self.client.completions.create(
            prompt=self.reference["prompt"], stop=[stop],
            max_tokens=self.reference["max_tokens"], **self.greedy())
        self.assertEqual(answer.choices[0].text, full[:full.index(stop)])
        self.assertEqual(answer.choices[0].finish_reason, "stop")
        sampled = self.client.completions.create(
            model=LLAMA, prompt="Once upon", n=3, max_tokens=8, seed=5,
            temperature=1.0)
        self.assertEqual([c.index for c in sampled.choices], [0, 1, 2])
        again = self.client.completions.create(
            model=LLAMA, prompt="Once upon", n=3, max_tokens=8, seed=5,
            temperature=1.0)
        # Each choice has its own seed (seed + index): reproducible, and not
        # all alike.
        self.assertEqual([c.text for c in again.choices],
                         [c.text for c in sampled.choices])
        self.assertGreater(len({c.text for c in sampled.choices}), 1)
        ended_by_length = sum(8 for c in sampled.choices
                              if c.finish_reason == "length")
        self.assertGreaterEqual(sampled.usage.completion_tokens,
                                ended_by_length)
        self.assertLessEqual(sampled.usage.completion_tokens, 3 * 8)

    # --- logprobs and penalties -------------------------------------------

    def assert_steps(self, got, steps):
        """`got`: (token text, logprob, [(text, logprob)]) per token."""
        self.assertEqual(len(got), len(steps))
        for i, ((text, logprob, top), step) in enumerate(zip(got, steps)):
            self.assertEqual(text, step["text"], f"step {i}")
            self.assertAlmostEqual(logprob, step["logprob"],
                                   delta=LOGPROB_TOLERANCE, msg=f"step {i}")
            # Completions' top_logprobs is a JSON object: castserve's keys
            # come in no particular order, so compare by token.
            expected_top = dict(zip(step["top_texts"], step["top_logprobs"]))
            if top:
                self.assertEqual(sorted(t for t, _ in top), sorted(expected_top))
            for text, value in top:
                self.assertAlmostEqual(value, expected_top[text],
                                       delta=LOGPROB_TOLERANCE)

    def test_completion_logprobs_equal_transformers(self):
        ref = self.logprobs_reference
        top = ref["top"]
        answer = self.client.completions.create(
            prompt=ref["prompt_ids"], max_tokens=ref["max_tokens"],
            logprobs=top, **self.greedy())
        logprobs = answer.choices[0].logprobs
        got = [(text, value, list(alternatives.items()))
               for text, value, alternatives in zip(
                   logprobs.tokens, logprobs.token_logprobs,
                   logprobs.top_logprobs)]
        # Alternatives that decode alike share one key: compare the distinct.
        distinct = all(len(set(s["top_texts"])) == top for s in ref["steps"])
        if distinct:
            self.assert_steps(got, ref["steps"])
        else:
            self.assert_steps([(t, v, []) for t, v, _ in got], ref["steps"])
        offsets = [0]
        for text in logprobs.tokens[:-1]:
            offsets.append(offsets[-1] + len(text))
        self.assertEqual(logprobs.text_offset, offsets)

        stream = self.client.completions.create(
            prompt=ref["prompt_ids"], max_tokens=ref["max_tokens"],
            logprobs=0, stream=True, **self.greedy())
        streamed = []
        for chunk in stream:
            for choice in chunk.choices:
                if choice.logprobs is not None:
                    streamed += list(zip(choice.logprobs.tokens,
                                         choice.logprobs.token_logprobs,
                                         [[]] * len(choice.logprobs.tokens)))
        self.assert_steps(streamed, ref["steps"])

    def test_chat_logprobs_equal_transformers(self):
        """Chat through the template: the prompt differs from the
        reference's, so the reference here is the completion of the same
        rendered ids, whose logprobs the test above checks. The chat
        request reuses the completion's cached prompt blocks (prefix
        caching), computed in another batch shape: equal within float
        rounding, not bit for bit."""
        messages = [{"role": "user", "content": "Count to three."}]
        ids = self.tokenizer.encode(chatml(messages),
                                    add_special_tokens=False).ids
        completion = self.client.completions.create(
            prompt=ids, max_tokens=6, logprobs=3, **self.greedy())
        expected = completion.choices[0].logprobs
        answer = self.client.chat.completions.create(
            messages=messages, max_completion_tokens=6, logprobs=True,
            top_logprobs=3, **self.greedy())
        content = answer.choices[0].logprobs.content
        self.assertEqual([c.token for c in content], expected.tokens)
        for entry, value, alternatives in zip(content, expected.token_logprobs,
                                              expected.top_logprobs):
            self.assertAlmostEqual(entry.logprob, value, delta=1e-5)
            self.assertEqual(entry.bytes, list(entry.token.encode()))
            self.assertEqual(len(entry.top_logprobs), 3)
            for alternative in entry.top_logprobs:
                if alternative.token in alternatives:
                    self.assertLessEqual(
                        abs(alternative.logprob -
                            alternatives[alternative.token]), 1e-5)
        stream = self.client.chat.completions.create(
            messages=messages, max_completion_tokens=6, logprobs=True,
            top_logprobs=3, stream=True, **self.greedy())
        streamed = []
        for chunk in stream:
            for choice in chunk.choices:
                if choice.logprobs is not None and choice.logprobs.content:
                    streamed += choice.logprobs.content
        self.assertEqual([c.model_dump() for c in streamed],
                         [c.model_dump() for c in content])

    def test_penalties_change_greedy_as_the_reference_says(self):
        ref = self.logprobs_reference
        for case in ref["penalty_cases"]:
            if case["repetition_penalty"] != 1.0:
                continue  # repetition_penalty is not an OpenAI field.
            kwargs = dict(prompt=ref["penalty_prompt_ids"],
                          max_tokens=ref["penalty_max_tokens"],
                          presence_penalty=case["presence_penalty"],
                          frequency_penalty=case["frequency_penalty"],
                          **self.greedy())
            answer = self.client.completions.create(**kwargs)
            self.assertEqual(answer.choices[0].text, case["text_output"], case)
            self.assertEqual(answer.usage.completion_tokens,
                             len(case["generated"]), case)

    # --- chat -------------------------------------------------------------

    def test_chat_equals_completion_of_the_rendered_template(self):
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name a colour.\nOne word."}]
        ids = self.tokenizer.encode(chatml(messages),
                                    add_special_tokens=False).ids
        answer = self.client.chat.completions.create(
            messages=messages, max_completion_tokens=12, **self.greedy())
        self.assertEqual(answer.object, "chat.completion")
        self.assertEqual(answer.choices[0].message.role, "assistant")
        self.assertEqual(answer.usage.prompt_tokens, len(ids))
        completion = self.client.completions.create(
            prompt=ids, max_tokens=12, **self.greedy())
        self.assertEqual(answer.choices[0].message.content,
                         completion.choices[0].text)
        self.assertEqual(answer.usage.completion_tokens,
                         completion.usage.completion_tokens)

        stream = self.client.chat.completions.create(
            messages=messages, max_completion_tokens=12, stream=True,
            **self.greedy())
        content, roles = "", set()
        for chunk in stream:
            self.assertEqual(chunk.object, "chat.completion.chunk")
            for choice in chunk.choices:
                content += choice.delta.content or ""
                if choice.delta.role:
                    roles.add(choice.delta.role)
        self.assertEqual(content, answer.choices[0].message.content)
        self.assertEqual(roles, {"assistant"})

    def test_closing_a_stream_frees_the_kv_cache(self):
        stream = self.client.chat.completions.create(
            messages=[{"role": "user", "content": "Tell me everything."}],
            max_tokens=200, stream=True, **self.greedy())
        next(iter(stream))
        self.assertGreater(self.kv_cache_bytes(), 0)
        stream.close()
        deadline = time.monotonic() + 30
        while self.kv_cache_bytes() != 0:
            self.assertLess(time.monotonic(), deadline, "KV cache not freed")
            time.sleep(0.05)

    # --- refusals ---------------------------------------------------------

    def assert_bad_request(self, call, param):
        with self.assertRaises(openai.BadRequestError) as raised:
            call()
        error = raised.exception.body
        self.assertEqual(error["param"], param, error)
        self.assertEqual(error["type"], "invalid_request_error")
        self.assertIn("message", error)

    def test_bad_requests_are_400_naming_the_field(self):
        chat = self.client.chat.completions
        say = [{"role": "user", "content": "hi"}]
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, temperature=7), "temperature")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, logprobs=True, top_logprobs=21),
            "top_logprobs")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, top_logprobs=2), "top_logprobs")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, presence_penalty=2.5),
            "presence_penalty")
        self.assert_bad_request(lambda: self.client.completions.create(
            model=LLAMA, prompt="x", frequency_penalty=-2.5),
            "frequency_penalty")
        self.assert_bad_request(lambda: self.client.completions.create(
            model=LLAMA, prompt="x", logprobs=21), "logprobs")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, n=9), "n")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say,
            response_format={"type": "json_object"}), "response_format")
        self.assert_bad_request(lambda: chat.create(
            model=LLAMA, messages=say, tools=[{"type": "function", "function":
                                               {"name": "f"}}]), "tools")
        self.assert_bad_request(lambda: chat.create(
            model=MINILM, messages=say), "model")
        self.assert_bad_request(lambda: self.client.embeddings.create(
            model=LLAMA, input="x"), "model")
        self.assert_bad_request(lambda: self.client.embeddings.create(
            model=MINILM, input="x", dimensions=1000), "dimensions")
        with self.assertRaises(openai.NotFoundError):
            chat.create(model="ghost", messages=say)

    def test_tokens_and_scopes(self):
        anonymous = openai.OpenAI(base_url=self.base_url, api_key="none",
                                  max_retries=0, timeout=TIMEOUT_SECONDS)
        with self.assertRaises(openai.AuthenticationError):
            anonymous.models.list()
        admin = openai.OpenAI(base_url=self.base_url, api_key=ADMIN_TOKEN,
                              max_retries=0, timeout=TIMEOUT_SECONDS)
        with self.assertRaises(openai.PermissionDeniedError):
            admin.embeddings.create(model=MINILM, input="x")
        anonymous.close()
        admin.close()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
