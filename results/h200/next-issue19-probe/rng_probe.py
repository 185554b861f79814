"""Issue 19, point 2: what torch 2.11 lets a recompute do with a generator across separately
captured forward and backward graphs (Megatron's per-layer graphs). Answers, on a GPU, each as one
line `Qn: yes|no (...)`; exits 0 when it ran (whatever the answers), 2 when it cannot run.

Q1  get_offset()/set_offset() of a CUDA generator between replays: rewinding the host offset before a
    replay reproduces the replay's draws (the replay prologue writes the host offset into the graph's
    device-side offset).
Q2  Two graphs captured apart, each drawing n values from the same generator: replay the first at
    offset o, rewind to o, replay the second: equal draws (the recompute in a backward graph can draw
    the forward graph's masks when the host offset is rewound between the two replays).
Q3  The same with a graph-safe generator state of its own (graphsafe_get_state / clone_state before
    capture, registered with both graphs through CUDAGraph.register_generator_state): its offset is
    independent of the default generator's.
Q4  Inside a capture, get_state() at a point and set_state() later: what the state bytes hold during
    capture (seed, offset: host or intragraph), and whether set_state rewinds the intragraph offset
    so that a second draw equals the first at replay (the known fact of issue 19).
Q5  A forward graph that draws a values before the region's n: the backward graph's region draws
    equal when the host offset is rewound to o + (a's increment), read from get_offset() around an
    eager run of the same ops (Philox increments are a function of the op and its size).
Q6  Tensor hooks at replay: a hook registered on the output of a graphed callable
    (make_graphed_callables) runs before the callable's backward graph replays (where a rewind
    would go), and a hook on its input's grad after it (where the offset is put back).
"""

import struct
import sys

import torch

if not torch.cuda.is_available():
    print("needs CUDA")
    sys.exit(2)
dev = torch.device("cuda")
N = 1 << 12


def decode(state: torch.Tensor) -> tuple:
    b = bytes(state.tolist())
    return struct.unpack("<QQ", b[:16]) if len(b) >= 16 else (None, None)


def capture(fn):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = fn()  # warmup, as torch.cuda.graph users do
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = fn()
    return g, out


torch.cuda.init()  # default_generators is empty until CUDA is initialized
gen = torch.cuda.default_generators[0]
report = []

try:
    # Q1
    g1, out1 = capture(lambda: torch.rand(N, device=dev))
    o = gen.get_offset()
    g1.replay(); a = out1.clone()
    g1.replay(); b = out1.clone()
    gen.set_offset(o)
    g1.replay(); c = out1.clone()
    report.append(f"Q1: {'yes' if torch.equal(a, c) and not torch.equal(a, b) else 'no'} "
                  f"(offset before {o}, after 2 replays {gen.get_offset()}; rewound replay equal: {torch.equal(a, c)}, "
                  f"two replays differ: {not torch.equal(a, b)})")
except Exception as e:  # noqa: BLE001
    report.append(f"Q1: error {type(e).__name__}: {e}")

try:
    # Q2
    gf, of = capture(lambda: torch.rand(N, device=dev))
    gb, ob = capture(lambda: torch.rand(N, device=dev))
    o = gen.get_offset()
    gf.replay()
    hw = gen.get_offset()
    gen.set_offset(o)
    gb.replay()
    gen.set_offset(hw)
    report.append(f"Q2: {'yes' if torch.equal(of, ob) else 'no'} (forward at {o}, high water {hw})")
except Exception as e:  # noqa: BLE001
    report.append(f"Q2: error {type(e).__name__}: {e}")

try:
    # Q3
    own = gen.clone_state()
    saved = gen.graphsafe_get_state()

    def drawn_from_own():
        gen.graphsafe_set_state(own)
        x = torch.rand(N, device=dev)
        gen.graphsafe_set_state(saved)
        return x

    gf = torch.cuda.CUDAGraph(); gb = torch.cuda.CUDAGraph()
    gf.register_generator_state(own); gb.register_generator_state(own)
    with torch.cuda.graph(gf):
        of = drawn_from_own()
    with torch.cuda.graph(gb):
        ob = drawn_from_own()
    gen.graphsafe_set_state(own); o = gen.get_offset(); gen.graphsafe_set_state(saved)
    d0 = gen.get_offset()
    gf.replay()
    gen.graphsafe_set_state(own); hw = gen.get_offset(); gen.set_offset(o); gen.graphsafe_set_state(saved)
    gb.replay()
    gen.graphsafe_set_state(own); gen.set_offset(hw); gen.graphsafe_set_state(saved)
    report.append(f"Q3: {'yes' if torch.equal(of, ob) else 'no'} (own state at {o} -> {hw}; default generator "
                  f"{d0} -> {gen.get_offset()})")
except Exception as e:  # noqa: BLE001
    report.append(f"Q3: error {type(e).__name__}: {e}")

try:
    # Q4
    seen = {}

    def twice():
        st = gen.get_state()
        seen["during"] = decode(st)
        x = torch.rand(N, device=dev)
        gen.set_state(st)
        y = torch.rand(N, device=dev)
        return x, y

    g4 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g4):
        x4, y4 = twice()
    before = decode(gen.get_state())
    g4.replay()
    report.append(f"Q4: {'yes' if torch.equal(x4, y4) else 'no'} (state during capture {seen['during']}, host "
                  f"state before replay {before})")
except Exception as e:  # noqa: BLE001
    report.append(f"Q4: error {type(e).__name__}: {e}")

try:
    # Q5
    A = 3 * N + 5
    o = gen.get_offset()
    torch.rand(A, device=dev)
    inc = gen.get_offset() - o
    gf, (pre, of) = capture(lambda: (torch.rand(A, device=dev), torch.rand(N, device=dev)))
    gb, ob = capture(lambda: torch.rand(N, device=dev))
    o = gen.get_offset()
    gf.replay()
    hw = gen.get_offset()
    gen.set_offset(o + inc)
    gb.replay()
    gen.set_offset(hw)
    report.append(f"Q5: {'yes' if torch.equal(of, ob) else 'no'} (a's increment {inc}, eager)")
except Exception as e:  # noqa: BLE001
    report.append(f"Q5: error {type(e).__name__}: {e}")

try:
    # Q6
    order = []
    lin = torch.nn.Linear(64, 64, device=dev)
    x0 = torch.randn(8, 64, device=dev, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(lin, (x0,))
    x = torch.randn(8, 64, device=dev, requires_grad=True)
    x.register_hook(lambda g: order.append("input grad") or g)
    y = graphed(x)
    y.register_hook(lambda g: order.append("output grad") or g)
    y.sum().backward()
    report.append(f"Q6: {'yes' if order == ['output grad', 'input grad'] else 'no'} (hooks ran in order {order})")
except Exception as e:  # noqa: BLE001
    report.append(f"Q6: error {type(e).__name__}: {e}")

print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
for line in report:
    print(line)
