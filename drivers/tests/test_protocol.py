"""Framing and request-loop tests (no torch needed except where noted)."""

from __future__ import annotations

import io
import json
import math
import os
import struct
import sys
import unittest
from typing import Any, BinaryIO, Dict, List, Tuple

from recap_drivers.core import protocol
from recap_drivers.core.protocol import Frame, FrameError, TruncatedError
from recap_drivers.core.worker import serve
from tests.helpers import DRIVERS, HAVE_TORCH, WORKER_SCHEMA, Worker, make_case, schema_validator


class FakeSUT:
    def hello(self):
        return {"sut": "fake", "version": "0", "device": "none", "capabilities": {}}

    def run(self, header, frames):
        return {"op": "observation", "id": header["id"], "status": "ok", "reason": "",
                "echo": [f.name for f in frames]}, [Frame(f.name + " back", f.dtype, f.shape, f.data) for f in frames]


def run_loop(data: bytes):
    inp = io.BytesIO(data)
    out = io.BytesIO()
    rc = serve(FakeSUT, inp, out, log=io.StringIO())
    out.seek(0)
    replies = []
    while True:
        m = protocol.read_message(out)
        if m is None:
            break
        replies.append(m)
    return rc, replies


def read(stream: BinaryIO) -> Tuple[Dict[str, Any], List[Frame]]:
    """A message that must be there (read_message's None is end of stream)."""
    msg = protocol.read_message(stream)
    assert msg is not None, "end of stream"
    return msg


class FramingTest(unittest.TestCase):
    def test_round_trip(self):
        f1 = Frame.from_floats("grad 0 1 2", (2, 3), [1.5, -2.0, 3.25, 0.0, -0.0, 1e-30])
        f2 = Frame("mask x", "u8", (5,), bytes([1, 0, 1, 1, 0]))
        f3 = Frame("empty", "f32", (0, 4), b"")
        data = protocol.encode_message({"op": "x", "id": 7, "v": [1.0, math.nan, math.inf, -math.inf]}, [f1, f2, f3])
        self.assertEqual(data.count(b"\n", 0, data.index(b"\n") + 1), 1)
        h, frames = read(io.BytesIO(data))
        self.assertEqual(h["op"], "x")
        self.assertEqual(h["id"], 7)
        self.assertEqual(h["v"], [1.0, "nan", "inf", "-inf"])  # recap's non-finite convention
        self.assertEqual([f.name for f in frames], ["grad 0 1 2", "mask x", "empty"])
        self.assertEqual(frames[0].shape, (2, 3))
        self.assertEqual(frames[0].floats(), [1.5, -2.0, 3.25, 0.0, -0.0, struct.unpack("<f", struct.pack("<f", 1e-30))[0]])
        self.assertEqual(struct.pack("<f", -0.0), frames[0].data[16:20])  # raw little-endian bits
        self.assertEqual(frames[1].data, bytes([1, 0, 1, 1, 0]))
        self.assertEqual(frames[2].data, b"")
        self.assertIsNone(protocol.read_message(io.BytesIO(b"")))

    def test_two_messages_back_to_back(self):
        a = protocol.encode_message({"op": "a"}, [Frame("p", "u8", (3,), b"\n\n\n")])
        b = protocol.encode_message({"op": "b"})
        s = io.BytesIO(a + b)
        self.assertEqual(read(s)[1][0].data, b"\n\n\n")  # payload newlines are data
        self.assertEqual(read(s)[0]["op"], "b")
        self.assertIsNone(protocol.read_message(s))

    def test_malformed(self):
        for bad in (b"{not json\n", b"[1,2]\n", b"\n", b"\xff\xfe\n"):
            with self.assertRaises(FrameError):
                protocol.read_message(io.BytesIO(bad))

    def test_descriptor_mismatch_skips_payload(self):
        hdr = {"op": "run", "id": 3, "frames": [{"name": "a", "dtype": "f32", "shape": [2], "nbytes": 4}]}
        s = io.BytesIO(json.dumps(hdr).encode() + b"\n" + b"abcd" + protocol.encode_message({"op": "next"}))
        with self.assertRaises(FrameError) as cm:
            protocol.read_message(s)
        self.assertEqual(cm.exception.request_id, 3)
        self.assertEqual(read(s)[0]["op"], "next")

    def test_truncated(self):
        hdr = {"op": "run", "frames": [{"name": "a", "dtype": "u8", "shape": [10], "nbytes": 10}]}
        with self.assertRaises(TruncatedError) as cm:
            protocol.read_message(io.BytesIO(json.dumps(hdr).encode() + b"\n" + b"123"))
        self.assertIn("truncated frame 'a'", str(cm.exception))
        with self.assertRaises(TruncatedError):
            protocol.read_message(io.BytesIO(b'{"op":"hello"'))  # no newline


class RetiringSUT(FakeSUT):
    """A SUT that still holds memory after its measurement: it asks to be replaced, and says how much."""
    retire = True
    held_after = 3 << 30

    def measure(self, header):
        return {"op": "measurement", "id": header["id"], "status": "ok", "reason": "", "timings": {"run_ms": 1.0}}


class LoopTest(unittest.TestCase):
    def test_a_retiring_measurement_says_what_it_still_holds(self):
        out = io.BytesIO()
        serve(RetiringSUT, io.BytesIO(protocol.encode_message({"op": "measure", "id": 4})), out, log=io.StringIO())
        out.seek(0)
        h, _ = read(out)
        self.assertEqual((h["op"], h["retire"], h["held_after"]), ("measurement", True, 3 << 30))

    def test_malformed_then_serving(self):
        data = (b"garbage\n" + protocol.encode_message({"op": "hello", "protocol": "recap.worker/1"}) +
                protocol.encode_message({"op": "bogus", "id": 1}) +
                protocol.encode_message({"op": "run", "id": 2}, [Frame("x", "u8", (2,), b"ab")]) +
                protocol.encode_message({"op": "shutdown"}) + protocol.encode_message({"op": "hello"}))
        rc, replies = run_loop(data)
        self.assertEqual(rc, 0)
        ops = [h["op"] for h, _ in replies]
        self.assertEqual(ops, ["error", "hello", "error", "observation"])
        self.assertIn("malformed JSON", replies[0][0]["message"])
        self.assertEqual(replies[2][0]["id"], 1)
        self.assertEqual([f.name for f in replies[3][1]], ["x back"])

    def test_truncated_exits(self):
        hdr = {"op": "run", "id": 1, "frames": [{"name": "a", "dtype": "u8", "shape": [10], "nbytes": 10}]}
        rc, replies = run_loop(json.dumps(hdr).encode() + b"\n12345")
        self.assertEqual(rc, 2)
        self.assertEqual(replies[-1][0]["op"], "error")
        self.assertIn("truncated", replies[-1][0]["message"])

    def test_protocol_mismatch(self):
        rc, replies = run_loop(protocol.encode_message({"op": "hello", "protocol": "recap.worker/0"}) +
                               protocol.encode_message({"op": "hello", "protocol": "recap.worker/1"}))
        self.assertEqual(rc, 2)
        self.assertEqual(len(replies), 1)
        self.assertIn("protocol mismatch", replies[0][0]["message"])

    def test_eof_is_clean(self):
        rc, replies = run_loop(b"")
        self.assertEqual((rc, replies), (0, []))


class SubprocessProtocolTest(unittest.TestCase):
    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_worker_keeps_serving_after_malformed(self):
        w = Worker()
        try:
            w.send_raw(b"this is not json\n")
            h, _ = w.recv()
            self.assertEqual(h["op"], "error")
            h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
            self.assertEqual(h["op"], "hello")
            self.assertEqual(h["sut"], "torch")
            self.assertIn("capabilities", h)
            # a run without frames: a clean error naming the first missing frame, then still serving
            h, _ = w.request({"op": "run", "id": 5, "case": {"layers": [{"kind": "gelu"}]}})
            self.assertEqual((h["op"], h["id"]), ("error", 5))
            self.assertIn("missing frame 'input 0 0'", h["message"])
            w.send_raw(protocol.encode_message({"op": "run", "id": 6, "case": {"layers": [{"kind": "conv"}]}}))
            h, _ = w.recv()
            self.assertIn("layers[0].kind: unknown layer kind 'conv'", h["message"])
            h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
            self.assertEqual(h["op"], "hello")
            w.send({"op": "shutdown"})
            self.assertEqual(w.close(), 0)
        finally:
            if w.p.poll() is None:
                w.p.kill()

    @unittest.skipUnless(HAVE_TORCH, "torch is not importable")
    def test_worker_truncated_frame(self):
        w = Worker()
        hdr = {"op": "run", "id": 1, "frames": [{"name": "a", "dtype": "f32", "shape": [4], "nbytes": 16}]}
        w.send_raw(json.dumps(hdr).encode() + b"\n" + b"\x00" * 5)
        w.p.stdin.close()
        h, _ = w.recv()
        self.assertEqual(h["op"], "error")
        self.assertIn("truncated frame 'a': expected 16 bytes, got 5", h["message"])
        self.assertEqual(w.close(), 2)

    def test_expect_version_mismatch_exits_2_before_starting(self):
        import subprocess

        env = dict(os.environ, PYTHONPATH=DRIVERS)
        for sut in ("torch", "megatron"):
            p = subprocess.run([sys.executable, "-m", "recap_drivers", "--sut", sut, "--expect-version", "0.0.1"],
                               input=protocol.encode_message({"op": "hello", "protocol": "recap.worker/1"}),
                               capture_output=True, env=env, timeout=120)
            self.assertEqual(p.returncode, 2, sut)
            self.assertEqual(p.stdout, b"", sut)  # no reply: it never served
            err = p.stderr.decode().strip().splitlines()[-1]
            self.assertRegex(err, r"^recap_drivers: ((torch|megatron-core) \S+ is installed, 0\.0\.1 was asked|"
                                  r"--expect-version 0\.0\.1: (torch|megatron-core) is not installed)", sut)


class SameVersionTest(unittest.TestCase):
    def test_local_part_counts_only_when_both_have_one(self):
        from recap_drivers.core.worker import same_version

        self.assertTrue(same_version("2.11.0", "2.11.0+cu130"))  # metadata without, hello with
        self.assertTrue(same_version("2.11.0+cu130", "2.11.0"))
        self.assertTrue(same_version("0.15.3", "0.15.3"))
        self.assertFalse(same_version("2.11.0+cu128", "2.11.0+cu130"))
        self.assertFalse(same_version("2.11.1", "2.11.0+cu130"))
        self.assertFalse(same_version("0.15.3", "0.15"))


class SchemaTest(unittest.TestCase):
    def test_schema_is_valid_json_schema(self):
        with open(WORKER_SCHEMA) as f:
            schema = json.load(f)
        self.assertEqual(schema["$schema"], "https://json-schema.org/draft/2020-12/schema")
        try:
            import jsonschema
        except ImportError:
            self.skipTest("jsonschema is not installed")
        jsonschema.Draft202012Validator.check_schema(schema)
        v = schema_validator()
        v.validate({"op": "hello", "protocol": "recap.worker/1"})
        v.validate({"op": "error", "message": "x"})
        with self.assertRaises(jsonschema.ValidationError):
            v.validate({"op": "run"})
        # "case" is recap.case/1's own schema, by reference
        case = make_case("schema", [{"kind": "gelu"}])
        v.validate({"op": "run", "id": 1, "case": case})
        for bad in ({**case, "layers": []}, {**case, "faults": ["bogus"]}, {**case, "typo": 1}):
            with self.assertRaises(jsonschema.ValidationError):
                v.validate({"op": "run", "id": 1, "case": bad})


if __name__ == "__main__":
    unittest.main()
