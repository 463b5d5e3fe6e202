#!/usr/bin/env python3
"""Tests of gpu_check.py on a machine without a GPU: its argument handling,
its helpers, and a whole run against a stub pack (shell scripts standing in
for the binaries) and a stub python3 with torch but no GPU, checking that
every part reports SKIPPED with its reason and the JSON's shape."""

import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_check  # noqa: E402


def write_exe(path, text):
    with open(path, "w") as f:
        f.write("#!/bin/bash\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


GTEST_SKIPPED = """for a in "$@"; do case "$a" in --gtest_output=json:*)
cat > "${a#--gtest_output=json:}" <<'J'
{"testsuites": [{"name": "S", "testsuite": [{"name": "T", "result": "SKIPPED"}]}]}
J
;; esac; done
echo "no CUDA device"
"""


def stub_pack(root):
    """A pack whose binaries behave as the real ones do without a GPU."""
    bin_dir = os.path.join(root, "pack", "bin")
    os.makedirs(bin_dir)
    os.makedirs(os.path.join(root, "pack", "lib"))
    for name in gpu_check.GPU_TESTS:
        write_exe(os.path.join(bin_dir, name), GTEST_SKIPPED)
    write_exe(os.path.join(bin_dir, "layerwise_casting_benchmark"),
              'echo "UNAVAILABLE: cuda:0: no CUDA device"; exit 3\n')
    write_exe(os.path.join(bin_dir, "castserve"), "exec sleep 60\n")
    write_exe(os.path.join(bin_dir, "castserve-client"),
              'echo \'{"models": [{"name": "siglip", "state": "UNAVAILABLE", '
              '"reason": "cuda:0: no CUDA device"}]}\'\n')
    python = os.path.join(root, "python3")
    write_exe(python, 'echo \'{"version": "2.11.0+cu130", "cuda": "13.0", '
              '"lib_dirs": [], "gpus": []}\'\n')
    return os.path.join(root, "pack"), python


class ArgumentsTest(unittest.TestCase):
    def test_defaults(self):
        args = gpu_check.parse_args(["out"])
        self.assertEqual(args.parts, list(gpu_check.PARTS))
        self.assertEqual(args.seconds, 30)

    def test_rejects_unknown_parts_and_bad_seconds(self):
        with self.assertRaises(SystemExit):
            gpu_check.parse_args(["out", "--parts=kernels,bogus"])
        with self.assertRaises(SystemExit):
            gpu_check.parse_args(["out", "--seconds=0"])
        with self.assertRaises(SystemExit):
            gpu_check.parse_args([])


class HelpersTest(unittest.TestCase):
    def test_npy_header_is_aligned_and_sized(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.npy")
            gpu_check.write_npy(path, (1, 3, 4, 5))
            data = open(path, "rb").read()
        self.assertTrue(data.startswith(b"\x93NUMPY\x01\x00"))
        header_len = struct.unpack("<H", data[8:10])[0]
        self.assertEqual((10 + header_len) % 64, 0)
        self.assertIn(b"'shape': (1, 3, 4, 5, )", data[10:10 + header_len])
        self.assertEqual(len(data) - 10 - header_len, 4 * 60)

    def test_overall_fails_on_any_failure_and_skips_only_when_all_skip(self):
        self.assertEqual(gpu_check.overall(["PASSED", "FAILED"]), "FAILED")
        self.assertEqual(gpu_check.overall(["SKIPPED", "PASSED"]), "PASSED")
        self.assertEqual(gpu_check.overall(["SKIPPED", "SKIPPED"]), "SKIPPED")

    def test_experiment_table_reads_the_benchmark_json(self):
        bench = {"results": [{"config": "cast/F8_E5M2/BF16",
                              "footprint_mb": 428.2, "batches": [
                                  {"batch": 16, "peak_mb": 1650.0,
                                   "latency_median_s": 0.05}]}]}
        self.assertEqual(gpu_check.experiment_table(bench), [
            {"config": "cast/F8_E5M2/BF16", "footprint_mb": 428.2,
             "batch": 16, "peak_mb": 1650.0, "latency_median_s": 0.05}])


class GlibcTest(unittest.TestCase):
    def test_a_pack_needing_a_newer_glibc_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "GLIBC_REQUIRED"), "w") as f:
                f.write("99.0\n")
            self.assertIn("glibc >= 99.0", gpu_check.check_glibc(tmp))
            with open(os.path.join(tmp, "GLIBC_REQUIRED"), "w") as f:
                f.write("2.0\n")
            self.assertEqual(gpu_check.check_glibc(tmp), "")
            self.assertEqual(gpu_check.check_glibc(tmp + "/none"), "")


class UnpackLibrariesTest(unittest.TestCase):
    def test_compressed_libraries_are_decompressed_beside_themselves(self):
        import lzma
        with tempfile.TemporaryDirectory() as tmp:
            lib = os.path.join(tmp, "lib")
            os.makedirs(lib)
            content = bytes(range(256)) * 1000
            with lzma.open(os.path.join(lib, "libbig.so.1.xz"), "wb") as f:
                f.write(content)
            with open(os.path.join(lib, "libsmall.so.2"), "wb") as f:
                f.write(b"as packed")
            gpu_check.unpack_libraries(tmp)
            with open(os.path.join(lib, "libbig.so.1"), "rb") as f:
                self.assertEqual(f.read(), content)
            with open(os.path.join(lib, "libsmall.so.2"), "rb") as f:
                self.assertEqual(f.read(), b"as packed")
            self.assertFalse(os.path.exists(
                os.path.join(lib, "libbig.so.1.part")))
            # Once: a second call leaves the decompressed file alone.
            before = os.stat(os.path.join(lib, "libbig.so.1")).st_mtime_ns
            gpu_check.unpack_libraries(tmp)
            self.assertEqual(
                os.stat(os.path.join(lib, "libbig.so.1")).st_mtime_ns, before)


class WithoutGpuTest(unittest.TestCase):
    def test_every_part_is_skipped_with_its_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            pack, python = stub_pack(tmp)
            out = os.path.join(tmp, "out")
            status = subprocess.run(
                [os.path.join(HERE, "gpu_check.sh"), out, f"--pack={pack}",
                 f"--python={python}"], capture_output=True, text=True,
                timeout=120)
            self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
            with open(os.path.join(out, "results.json")) as f:
                results = json.load(f)
        self.assertEqual(results["gpus"], [])
        self.assertEqual(sorted(results["parts"]), sorted(gpu_check.PARTS))
        for name, result in results["parts"].items():
            self.assertEqual(result["status"], "SKIPPED", name)
            self.assertIn("no CUDA device", result["reason"], name)
        kernels = results["parts"]["kernels"]["tests"]
        self.assertEqual([t["test"] for t in kernels], list(gpu_check.GPU_TESTS))

    def test_missing_pack_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            _, python = stub_pack(tmp)
            out = os.path.join(tmp, "out")
            status = subprocess.run(
                [os.path.join(HERE, "gpu_check.sh"), out,
                 f"--pack={tmp}/nothing", f"--python={python}",
                 "--parts=daemon"], capture_output=True, text=True, timeout=60)
            self.assertEqual(status.returncode, 1)
            with open(os.path.join(out, "results.json")) as f:
                results = json.load(f)
        self.assertEqual(results["parts"]["daemon"]["status"], "FAILED")
        self.assertIn("pack_daemon.sh", results["parts"]["daemon"]["reason"])
        self.assertEqual(results["parts"]["kernels"]["status"], "SKIPPED")


if __name__ == "__main__":
    unittest.main()
