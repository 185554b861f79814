"""A worker ends with the process that started it, even while its stdin stays open (Linux).

recap killed by `timeout -k` (SIGKILL) left its workers running: one in the middle of a long
`measure` request reads no EOF, and went on using the GPU under the next command's measurements
(results/h200/2026-12-03-issue19-s8). The worker asks the kernel for SIGKILL at its parent's end.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import unittest

from recap_drivers import PROTOCOL
from recap_drivers.core import protocol
from tests.helpers import DRIVERS, HAVE_TORCH

# The parent: starts the worker on the fds it is given and says the worker's pid, then waits.
PARENT = """
import os, subprocess, sys, time
fin, fout, say = (int(a) for a in sys.argv[1:4])
w = subprocess.Popen([sys.executable, "-m", "recap_drivers", "--sut", "torch", "--device", "cpu"],
                     stdin=fin, stdout=fout, stderr=subprocess.DEVNULL)
os.write(say, str(w.pid).encode() + b"\\n")
time.sleep(600)
"""


@unittest.skipUnless(HAVE_TORCH and sys.platform.startswith("linux"), "torch and Linux's PR_SET_PDEATHSIG")
class WorkerLifetimeTest(unittest.TestCase):
    def test_worker_dies_with_its_parent(self) -> None:
        in_r, in_w = os.pipe()  # the worker's stdin: this test keeps its write end open throughout
        out_r, out_w = os.pipe()
        say_r, say_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=DRIVERS + os.pathsep + os.environ.get("PYTHONPATH", ""))
        parent = subprocess.Popen([sys.executable, "-c", PARENT, str(in_r), str(out_w), str(say_w)],
                                  pass_fds=(in_r, out_w, say_w), env=env)
        for fd in (in_r, out_w, say_w):
            os.close(fd)
        worker_pid = int(os.read(say_r, 64))
        os.close(say_r)
        try:
            # a reply to hello: the worker is serving, past its request to die with its parent
            os.write(in_w, protocol.encode_message({"op": "hello", "protocol": PROTOCOL}, []))
            with os.fdopen(out_r, "rb", closefd=False) as out:
                msg = protocol.read_message(out)
            self.assertIsNotNone(msg)
            assert msg is not None
            self.assertEqual(msg[0]["op"], "hello", msg[0])
            parent.send_signal(signal.SIGKILL)
            parent.wait()
            # the worker's end closes its stdout (the parent's copy went with the parent): EOF
            ready, _, _ = select.select([out_r], [], [], 60)
            self.assertTrue(ready, "the worker outlived its parent by 60 s")
            self.assertEqual(os.read(out_r, 1), b"")
        finally:
            try:
                os.kill(worker_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(in_w)
            os.close(out_r)
            if parent.poll() is None:
                parent.kill()
                parent.wait()


if __name__ == "__main__":
    unittest.main()
