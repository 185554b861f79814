"""recap's own runtime behind recap.worker/1 (`recap worker`), end to end, without a GPU.

The binary comes from RECAP_BIN (ctest sets it); without it these tests skip. The observation's
gradient and parameter frames must digest, by recap's rule (harness/training/executor.h: FNV-1a
64 over each tensor's length and bits), to what `recap run --json` reports for the same case: the
protocol carries the run bit for bit.
"""

import json
import os
import struct
import subprocess
import tempfile
import unittest

from recap_drivers.core.observe.digest import FNV_OFFSET, fnv1a64
from tests import helpers as client

RECAP = os.environ.get("RECAP_BIN", "")
CORPUS = os.path.join(os.path.dirname(client.DRIVERS), "corpus")


def digest(tensors):
    h = FNV_OFFSET
    for t in tensors:
        h = fnv1a64(struct.pack("<I", len(t.data) // 4), h)
        h = fnv1a64(t.data, h)
    return "%016x" % h


@unittest.skipUnless(RECAP, "RECAP_BIN is not set")
class RecapWorker(unittest.TestCase):
    def worker(self):
        return client.Worker(command=[RECAP, "worker", "--backend", "sim"])

    def test_hello_names_recap_and_every_dimension(self):
        w = self.worker()
        h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
        self.assertEqual((h["op"], h["sut"], h["protocol"]), ("hello", "recap", "recap.worker/1"))
        caps = h["capabilities"]
        self.assertIn("block", caps["kinds"])
        self.assertEqual(caps["policy"], ["naive", "skip", "graph-safe"])
        self.assertEqual(caps["executor"], ["eager", "per-layer", "full-iteration"])
        # recap's runtime does not model torch's non-reentrant checkpoint: not listed
        self.assertEqual(caps["checkpoint_style"], ["reentrant", "without-output"])
        self.assertNotIn("extensions", caps)
        # --gpus (issue 22): what it sees of its GPU; on sim none
        self.assertEqual(h["visible_device"], {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                               "uuid": None, "pci_bus_id": None})
        w.send({"op": "shutdown"})
        self.assertEqual(w.close(), 0)

    def test_hello_says_the_cuda_visible_devices_it_saw(self):
        w = client.Worker(command=[RECAP, "worker", "--backend", "sim"], env_extra={"CUDA_VISIBLE_DEVICES": "2"})
        h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
        self.assertEqual(h["visible_device"]["cuda_visible_devices"], "2")
        w.send({"op": "shutdown"})
        self.assertEqual(w.close(), 0)

    def test_a_non_reentrant_checkpoint_is_skipped_with_its_reason(self):
        with open(os.path.join(CORPUS, "graph-safe-eager.json")) as f:
            case = json.load(f)
        case["checkpoint_style"] = "non-reentrant"
        w = self.worker()
        h, frames = w.request({"op": "run", "id": 5, "case": case})
        self.assertEqual((h["op"], h["id"], h["status"]), ("observation", 5, "skipped"))
        self.assertTrue(h["reason"].startswith("checkpoint_style non-reentrant: recap's runtime does not model"), h["reason"])
        self.assertEqual((h["steps"], frames), ([], {}))
        self.assertGreater(len(h["param_names"]), 0)
        # without a checkpoint the style has no effect: the case runs
        for layer in case["layers"]:
            layer["checkpoint"] = "none"
            layer.pop("checkpoint_modules", None)
        h, _ = w.request({"op": "run", "id": 6, "case": case})
        self.assertEqual(h["status"], "ok", h.get("reason"))
        self.assertEqual(w.close(), 0)

    def test_observation_equals_recap_run_bit_for_bit(self):
        path = os.path.join(CORPUS, "graph-safe-per-layer.json")
        with open(path) as f:
            case = json.load(f)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "run.json")
            subprocess.run([RECAP, "run", path, "--backend", "sim", "--json", out], check=False,
                           stdout=subprocess.DEVNULL)
            with open(out) as f:
                ref = json.load(f)
        w = self.worker()
        h, frames = w.request({"op": "run", "id": 3, "case": case})
        self.assertEqual((h["op"], h["id"], h["status"]), ("observation", 3, "ok"), h.get("reason"))
        self.assertEqual(len(h["steps"]), len(ref["steps"]))
        n = len(h["param_names"])
        for got, want in zip(h["steps"], ref["steps"]):
            s = got["step"]
            self.assertEqual(got["phase"], want["phase"])
            self.assertEqual(got["losses"], want["losses"])
            self.assertEqual(digest([frames["grad %d %d" % (s, i)] for i in range(n)]), want["grad_digest"])
            self.assertEqual(digest([frames["param %d %d" % (s, i)] for i in range(n)]), want["param_digest"])
            for mb, want_mb in enumerate(want["microbatch_grad_digests"]):
                self.assertEqual(digest([frames["grad %d %d %d" % (s, mb, i)] for i in range(n)]), want_mb)
            self.assertGreater(len(got["draws"]), 0)  # dropout 0.1: the ledger's draws travel too
        self.assertGreater(h["memory"]["activations_in_graphs_bytes"], 0)
        self.assertEqual(w.close(), 0)

    def test_measure_gives_the_ledgers_bytes_and_times_the_replays(self):
        # recap tradeoff's request (PROTOCOL.md, "measure"), as recap measures in process
        with open(os.path.join(CORPUS, "graph-safe-per-layer.json")) as f:
            case = json.load(f)
        w = self.worker()
        hello, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
        self.assertEqual(hello["ops"], ["measure"])
        a, frames = w.request({"op": "measure", "id": 1, "case": case})
        b, _ = w.request({"op": "measure", "id": 2, "case": case})
        self.assertEqual((a["op"], a["status"], frames), ("measurement", "ok", {}), a.get("reason"))
        self.assertEqual(a["clock"], "host-clock")
        self.assertEqual(len(a["step_ms"]), case["replays"])
        mem = a["memory"]
        for k in ("peak_allocated", "peak_reserved", "device_used", "graph_pool", "capture_peak", "activations_in_graphs"):
            self.assertGreater(mem[k], 0, k)
        self.assertIsNone(mem["activations_eager"])
        self.assertEqual(mem, b["memory"])  # exact bytes: the same program, the same figures
        self.assertEqual(len(a["per_layer"]), len(case["layers"]))
        m, _ = w.request({"op": "measure", "id": 3, "what": "matmul-bf16"})
        self.assertIsNone(m["matmul_bf16_tflops"])
        self.assertIn("no GPU", m["reason"])
        self.assertEqual(w.close(), 0)

    def test_a_failed_capture_is_an_observation_with_its_failure(self):
        with open(os.path.join(CORPUS, "naive-capture-failure-min.json")) as f:
            case = json.load(f)
        w = self.worker()
        h, _ = w.request({"op": "run", "id": 1, "case": case})
        self.assertEqual(h["status"], "failed")
        self.assertEqual(h["failure"]["error"], "cudaErrorStreamCaptureUnsupported")
        self.assertEqual(h["failure"]["phase"], "capture")
        w.close()

    def test_bad_requests_get_one_line_errors(self):
        w = self.worker()
        # Sent raw: the client's schema check would refuse this case before it left.
        w.send_raw(client.protocol.encode_message({"op": "run", "id": 2, "case": {"layers": [{"kind": "conv"}]}}, []))
        h, _ = w.recv()
        self.assertEqual(h["op"], "error")
        self.assertIn("unknown layer kind 'conv'", h["message"])
        h, _ = w.request({"op": "frobnicate", "id": 4})
        self.assertEqual((h["op"], h["id"]), ("error", 4))
        w.send_raw(b"this is not json\n")  # the stream cannot be trusted after this: error, exit 2
        h, _ = w.recv()
        self.assertEqual(h["op"], "error")
        self.assertIn("not JSON", h["message"])
        self.assertEqual(w.close(), 2)

    def test_a_truncated_frame_ends_the_worker_with_status_2(self):
        w = self.worker()
        w.send_raw(b'{"op":"run","id":1,"case":{},"frames":[{"name":"param x","dtype":"f32","shape":[4],"nbytes":16}]}\n1234')
        w.p.stdin.close()
        h, _ = w.recv()
        self.assertIn("truncated frame 'param x': expected 16 bytes, got 4", h["message"])
        self.assertEqual(w.close(), 2)


if __name__ == "__main__":
    unittest.main()
