"""recap.case/1 parsing and validation, mirroring harness/training/spec.cpp (field names, defaults,
ranges and one-line error messages), plus the model facts every SUT needs: layer paths, the
parameters with recap's names, shapes and order (models/layers.cpp), and the dropout draw sites.

No torch here: megatron and torch SUTs share it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, NoReturn, Sequence, Set, Tuple

LAYER_KINDS = ["linear", "layernorm", "rmsnorm", "gelu", "swiglu", "dropout", "attention", "mlp", "block"]
GRANULARITIES = ["none", "full", "selective"]
# recap.case/1 styles, in recap's order (kStyleNames): "non-reentrant" is
# torch.utils.checkpoint(use_reentrant=False); a SUT that cannot run a style skips the case.
STYLES = ["reentrant", "without-output", "non-reentrant"]
# Styles a driver reads beyond recap.case/1: none today (kept for parse_case's callers).
EXTENSION_STYLES: List[str] = []
POLICIES = ["naive", "skip", "graph-safe"]
EXECUTORS = ["eager", "per-layer", "full-iteration"]
GENERATORS = ["host", "graph-safe"]
DEVICE_STATES = ["shared", "per-capture"]
WARMUP_BACKWARDS = ["backward", "grad-of-inputs"]
DTYPES = ["fp32", "bf16"]
SELECTIVE_ROLES = ["attn_core", "mlp", "norm"]
# recap's own fault points, in recap's order (harness/runtime/faults.h, kFaultNames; docs/faults.md)
FAULTS = ["rng-snapshot-is-handle", "rng-offset-baked", "generator-not-registered", "phase-flag-leak",
          "warmup-consumes-rng", "static-input-stale", "free-under-graph", "microbatch-index",
          "grad-accum-not-zeroed", "alloc-in-capture", "side-stream-unjoined", "restore-across-capture",
          "tracker-keys-drift", "hidden-param-grad", "grad-aliases-static", "pool-order",
          "output-aliases-input-freed", "warmup-mutates-buffers", "philox-increment-short",
          "graph-pool-leak", "without-output-not-rebound", "recompute-saves-nothing", "pool-no-reuse",
          "layer-segfault", "cuda-dropout-offset", "grad-buffer-empty"]

CASE_KEYS = {"schema", "name", "description", "expected", "hidden", "tokens", "dtype", "layers",
             "checkpoint_style", "policy", "executor", "warmup", "replays", "microbatches",
             "microbatch_order", "generator", "device_state", "warmup_backward", "shared_pool", "seeds", "lr",
             "tp", "pp", "vp", "dp", "sp", "faults"}
LAYER_KEYS = {"kind", "heads", "ffn_hidden", "dropout", "checkpoint", "checkpoint_modules", "graphed"}


class CaseError(ValueError):
    """One line naming the field and the problem, as recap's case_from_json does."""


def roles_of(kind: str) -> List[str]:
    if kind == "block":
        return ["attn_core", "mlp", "norm"]
    if kind == "attention":
        return ["attn_core"]
    return []


def _f32(x: float) -> float:
    """The float32 value of x (recap stores dropout and lr as float)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@dataclass
class Layer:
    kind: str
    heads: int = 1
    ffn_hidden: int = 0
    dropout: float = 0.0
    checkpoint: str = "none"
    checkpoint_modules: List[str] = field(default_factory=list)
    graphed: bool = True


@dataclass
class Case:
    name: str = ""
    description: str = ""
    hidden: int = 16
    tokens: int = 8
    dtype: str = "fp32"
    layers: List[Layer] = field(default_factory=list)
    checkpoint_style: str = "reentrant"
    policy: str = "graph-safe"
    executor: str = "eager"
    warmup: int = 1
    replays: int = 3
    microbatches: int = 1
    microbatch_order: List[int] = field(default_factory=list)  # empty: [1, -1] per microbatch
    generator: str = "graph-safe"
    device_state: str = "shared"
    warmup_backward: str = "backward"
    shared_pool: bool = True
    seed_param: int = 1
    seed_data: int = 2
    seed_rng: int = 3
    lr: float = _f32(0.05)
    tp: int = 1  # tensor-parallel world size; a run request's "tp" is what a rank group reads (PROTOCOL.md 10)
    pp: int = 1  # pipeline stages; as tp, the run request's "pp" is what a rank group reads
    vp: int = 1  # virtual pipeline stages per pipeline rank (pp > 1): megatron-core's interleaved schedule
    dp: int = 1  # data-parallel replicas: each runs microbatches / dp of the step's, gradients summed across them
    sp: bool = False  # sequence parallelism over the tensor-parallel ranks (tp > 1)
    expected: Any = None
    faults: List[str] = field(default_factory=list)  # recap's runtime's fault points; frameworks have none
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.warmup + self.replays

    def order(self) -> List[int]:
        if self.microbatch_order:
            return list(self.microbatch_order)
        o: List[int] = []
        for _ in range(self.microbatches):
            o += [1, -1]
        return o

    def layer_names(self) -> List[str]:
        return [f"{l.kind}{i}" for i, l in enumerate(self.layers)]

    def any_checkpoint(self) -> bool:
        return any(l.checkpoint != "none" for l in self.layers)

    def any_dropout(self) -> bool:
        return any(l.dropout > 0.0 and l.kind in ("dropout", "attention", "mlp", "block") for l in self.layers)

    def ffn(self, l: Layer) -> int:
        return l.ffn_hidden if l.ffn_hidden > 0 else 4 * self.hidden

    def with_executor(self, executor: str) -> "Case":
        import copy

        c = copy.deepcopy(self)
        c.executor = executor
        return c


# ---- reading --------------------------------------------------------------------------------


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def _fail(field_: str, what: str) -> NoReturn:
    raise CaseError(f"{field_}: {what}")


def _int(v: Any, f: str, lo: int = -(2**31), hi: int = 2**31 - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(f, f"expected an integer, got {_type_of(v)}")
    if v < lo or v > hi:
        _fail(f, f"integer out of range: {v}")
    return v


def _u64(v: Any, f: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(f, f"expected a non-negative integer, got {_type_of(v)}")
    if v < 0:
        _fail(f, f"expected a non-negative integer, got {v}")
    if v >= 2**64:
        _fail(f, "integer out of range")
    return v


def _num(v: Any, f: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        _fail(f, f"expected a number, got {_type_of(v)}")
    return float(v)


def _str(v: Any, f: str) -> str:
    if not isinstance(v, str):
        _fail(f, f"expected a string, got {_type_of(v)}")
    return v


def _enum(v: Any, f: str, choices: List[str], what: str, extra: Sequence[str] = ()) -> str:
    s = _str(v, f)
    if s not in choices and s not in extra:
        _fail(f, f"unknown {what} '{s}' (one of: {', '.join(choices)})")
    return s


def _check_keys(obj: Dict[str, Any], where: str, known: Set[str]) -> None:
    for k in obj:
        if k.startswith("_"):
            continue
        if k not in known:
            _fail(f"{where}.{k}" if where else k, "unknown field")


def _parse_layer(j: Any, where: str) -> Layer:
    if not isinstance(j, dict):
        _fail(where, f"expected an object, got {_type_of(j)}")
    _check_keys(j, where, LAYER_KEYS)
    if "kind" not in j:
        _fail(where + ".kind", "missing")
    kind = _str(j["kind"], where + ".kind")
    if kind not in LAYER_KINDS:
        _fail(where + ".kind", f"unknown layer kind '{kind}' (one of: {', '.join(LAYER_KINDS)})")
    l = Layer(kind=kind)
    if "heads" in j:
        l.heads = _int(j["heads"], where + ".heads")
    if "ffn_hidden" in j:
        l.ffn_hidden = _int(j["ffn_hidden"], where + ".ffn_hidden")
    if "dropout" in j:
        l.dropout = _f32(_num(j["dropout"], where + ".dropout"))
    if "checkpoint" in j:
        c = j["checkpoint"]
        if isinstance(c, bool):
            l.checkpoint = "full" if c else "none"
        else:
            l.checkpoint = _enum(c, where + ".checkpoint", GRANULARITIES, "checkpoint granularity")
    if "checkpoint_modules" in j:
        m = j["checkpoint_modules"]
        f = where + ".checkpoint_modules"
        if not isinstance(m, list):
            _fail(f, f"expected an array of module roles, got {_type_of(m)}")
        l.checkpoint_modules = [_str(x, f"{f}[{i}]") for i, x in enumerate(m)]
    if "graphed" in j:
        g = j["graphed"]
        if not isinstance(g, bool):
            _fail(where + ".graphed", f"expected true or false, got {_type_of(g)}")
        l.graphed = g
    return l


def parse_case(j: Any, extension_styles: Sequence[str] = ()) -> Case:
    """Parses and validates a recap.case/1 object; raises CaseError with one line."""
    if not isinstance(j, dict):
        _fail("case", f"expected a JSON object, got {_type_of(j)}")
    _check_keys(j, "", CASE_KEYS)
    c = Case(raw=j)
    if "schema" in j:
        s = _str(j["schema"], "schema")
        if s != "recap.case/1":
            _fail("schema", f"unsupported schema '{s}' (this driver reads recap.case/1)")
    if "name" in j:
        c.name = _str(j["name"], "name")
    if "description" in j:
        c.description = _str(j["description"], "description")
    c.expected = j.get("expected")
    if "hidden" in j:
        c.hidden = _int(j["hidden"], "hidden")
    if "tokens" in j:
        c.tokens = _int(j["tokens"], "tokens")
    if "dtype" in j:
        c.dtype = _enum(j["dtype"], "dtype", DTYPES, "dtype")
    if "layers" not in j:
        _fail("layers", "missing (a case needs at least one layer)")
    if not isinstance(j["layers"], list):
        _fail("layers", f"expected an array, got {_type_of(j['layers'])}")
    c.layers = [_parse_layer(x, f"layers[{i}]") for i, x in enumerate(j["layers"])]
    if "checkpoint_style" in j:
        c.checkpoint_style = _enum(j["checkpoint_style"], "checkpoint_style", STYLES, "checkpoint style",
                                   list(extension_styles))
    if "policy" in j:
        c.policy = _enum(j["policy"], "policy", POLICIES, "policy")
    if "executor" in j:
        c.executor = _enum(j["executor"], "executor", EXECUTORS, "executor")
    for key in ("warmup", "replays", "microbatches"):
        if key in j:
            setattr(c, key, _int(j[key], key))
    if "microbatch_order" in j:
        o = j["microbatch_order"]
        if not isinstance(o, list):
            _fail("microbatch_order", f"expected an array of +1/-1, got {_type_of(o)}")
        c.microbatch_order = [_int(x, f"microbatch_order[{i}]") for i, x in enumerate(o)]
    if "generator" in j:
        c.generator = _enum(j["generator"], "generator", GENERATORS, "generator mode")
    if "device_state" in j:
        c.device_state = _enum(j["device_state"], "device_state", DEVICE_STATES, "device-state model")
    if "warmup_backward" in j:
        c.warmup_backward = _enum(j["warmup_backward"], "warmup_backward", WARMUP_BACKWARDS, "warmup backward style")
    if "shared_pool" in j:
        v = j["shared_pool"]
        if not isinstance(v, bool):
            _fail("shared_pool", f"expected true or false, got {_type_of(v)}")
        c.shared_pool = v
    if "seeds" in j:
        sd = j["seeds"]
        if not isinstance(sd, dict):
            _fail("seeds", f"expected an object {{param, data, rng}}, got {_type_of(sd)}")
        _check_keys(sd, "seeds", {"param", "data", "rng"})
        for key in ("param", "data", "rng"):
            if key in sd:
                setattr(c, "seed_" + key, _u64(sd[key], "seeds." + key))
    if "lr" in j:
        c.lr = _f32(_num(j["lr"], "lr"))
    if "tp" in j:
        c.tp = _int(j["tp"], "tp")
    if "pp" in j:
        c.pp = _int(j["pp"], "pp")
    if "vp" in j:
        c.vp = _int(j["vp"], "vp")
    if "dp" in j:
        c.dp = _int(j["dp"], "dp")
    if "sp" in j:
        v = j["sp"]
        if not isinstance(v, bool):
            _fail("sp", f"expected true or false, got {_type_of(v)}")
        c.sp = v
    # recap's own fault points (docs/faults.md), read last as spec.cpp does: kept, so the driver can skip the case
    if "faults" in j:
        fs = j["faults"]
        if not isinstance(fs, list):
            _fail("faults", f"expected an array of fault names, got {_type_of(fs)}")
        for i, x in enumerate(fs):
            name = _str(x, f"faults[{i}]")
            if name not in FAULTS:
                _fail(f"faults[{i}]", f"unknown fault '{name}' (known: {', '.join(FAULTS)})")
        c.faults = list(fs)
    problem = validate(c)
    if problem:
        raise CaseError(problem)
    return c


def _range(f: str, lo: int, hi: int, got: int) -> str:
    return f"{f} must be in [{lo}, {hi}], got {got}"


def validate(c: Case) -> str:
    if not 1 <= c.hidden <= 4096:
        return _range("hidden", 1, 4096, c.hidden)
    if not 1 <= c.tokens <= 8192:
        return _range("tokens", 1, 8192, c.tokens)
    if not c.layers:
        return "layers: a case needs at least one layer"
    if len(c.layers) > 64:
        return f"layers: at most 64 layers, got {len(c.layers)}"
    for i, l in enumerate(c.layers):
        at = f"layers[{i}]"
        if not 1 <= l.heads <= 64:
            return _range(at + ".heads", 1, 64, l.heads)
        if l.kind in ("attention", "block") and c.hidden % l.heads != 0:
            return f"{at}.heads: hidden {c.hidden} is not divisible by heads {l.heads}"
        if not 0 <= l.ffn_hidden <= 16384:
            return _range(at + ".ffn_hidden", 0, 16384, l.ffn_hidden)
        if not (0.0 <= l.dropout < 1.0):
            return f"{at}.dropout must be in [0, 1), got {l.dropout:g}"
        if l.checkpoint == "selective":
            if not l.checkpoint_modules:
                return (f"{at}.checkpoint_modules: a selective checkpoint names at least one module "
                        f"({', '.join(SELECTIVE_ROLES)})")
            seen = set()
            has = roles_of(l.kind)
            for k, r in enumerate(l.checkpoint_modules):
                mf = f"{at}.checkpoint_modules[{k}]"
                if r not in SELECTIVE_ROLES:
                    return f"{mf}: unknown module '{r}' (one of: {', '.join(SELECTIVE_ROLES)})"
                if r in seen:
                    return f"{mf}: module '{r}' named twice"
                seen.add(r)
                if r not in has:
                    tail = ("it has none; checkpoint it whole with \"full\"" if not has else "it has: " + ", ".join(has))
                    return f"{mf}: a '{l.kind}' layer has no '{r}' module ({tail})"
            if c.checkpoint_style == "without-output":
                return (f"{at}.checkpoint: checkpoint_style without-output checkpoints whole layers only "
                        f"(granularity full), this layer is selective")
        elif l.checkpoint_modules:
            return (f"{at}.checkpoint_modules: only a selective checkpoint names modules "
                    f"(checkpoint is '{l.checkpoint}')")
    if not 0 <= c.warmup <= 3:
        return _range("warmup", 0, 3, c.warmup)
    if not 0 <= c.replays <= 1000:
        return _range("replays", 0, 1000, c.replays)
    if c.steps < 1:
        return "replays: a case runs at least one step (warmup + replays >= 1)"
    if not 1 <= c.microbatches <= 16:
        return _range("microbatches", 1, 16, c.microbatches)
    if c.microbatch_order:
        fwd = bwd = 0
        for i, e in enumerate(c.microbatch_order):
            at = f"microbatch_order[{i}]"
            if e not in (1, -1):
                return f"{at}: {e} is not +1 (a forward) or -1 (a backward) of the one model chunk"
            if e == 1:
                fwd += 1
            else:
                bwd += 1
                if bwd > fwd:
                    return f"{at}: backward of microbatch {bwd - 1} before its forward"
        if fwd != bwd:
            return f"microbatch_order: {fwd} forwards but {bwd} backwards"
        if fwd != c.microbatches:
            return f"microbatch_order: {fwd} forwards for microbatches {c.microbatches}"
    if not math.isfinite(c.lr) or c.lr < 0.0 or c.lr > 10.0:
        return f"lr must be in [0, 10], got {c.lr:g}"
    if c.tp < 1 or c.tp > 64:
        return _range("tp", 1, 64, c.tp)
    if c.pp < 1 or c.pp > 64:
        return _range("pp", 1, 64, c.pp)
    if c.dp < 1 or c.dp > 64:
        return _range("dp", 1, 64, c.dp)
    if c.tp * c.pp * c.dp > 64:
        if c.dp == 1:
            return f"pp {c.pp} with tp {c.tp}: {c.tp * c.pp} ranks, at most 64"
        return f"dp {c.dp} with tp {c.tp} and pp {c.pp}: {c.tp * c.pp * c.dp} ranks, at most 64"
    if c.vp < 1 or c.vp > 16:
        return _range("vp", 1, 16, c.vp)
    if c.vp > 1 and c.pp < 2:
        return f"vp: virtual pipeline stages interleave the chunks of pipeline ranks: needs pp > 1, got pp {c.pp}"
    if c.sp and c.tp < 2:
        return f"sp: sequence parallelism splits the sequence over tensor-parallel ranks: needs tp > 1, got tp {c.tp}"
    return ""


# ---- model facts ----------------------------------------------------------------------------


@dataclass
class ParamInfo:
    name: str  # "block0.attn.qkv.weight"
    shape: Tuple[int, ...]
    layer: int  # top-level layer index


@dataclass
class DropSite:
    layer: str  # path, "block0.attn.core"
    op: str  # "dropout" | "attn_dropout"
    numel: int
    p: float
    top: int  # top-level layer index


def _linear(path: str, i: int, n_in: int, n_out: int, bias: bool = True) -> List[ParamInfo]:
    p = [ParamInfo(path + ".weight", (n_out, n_in), i)]
    if bias:
        p.append(ParamInfo(path + ".bias", (n_out,), i))
    return p


def _norm(path: str, i: int, w: int, rms: bool) -> List[ParamInfo]:
    p = [ParamInfo(path + ".weight", (w,), i)]
    if not rms:
        p.append(ParamInfo(path + ".bias", (w,), i))
    return p


def param_infos(c: Case) -> List[ParamInfo]:
    """Every parameter in recap's order (Model::params(): layers in order, each as its params())."""
    out: List[ParamInfo] = []
    h = c.hidden
    for i, l in enumerate(c.layers):
        name = f"{l.kind}{i}"
        k = l.kind
        if k == "linear":
            out += _linear(name, i, h, h)
        elif k in ("layernorm", "rmsnorm"):
            out += _norm(name, i, h, k == "rmsnorm")
        elif k == "swiglu":
            f = c.ffn(l)
            out += _linear(name + ".gate", i, h, f, False) + _linear(name + ".up", i, h, f, False)
            out += _linear(name + ".down", i, f, h, False)
        elif k == "attention":
            out += _linear(name + ".qkv", i, h, 3 * h) + _linear(name + ".proj", i, h, h)
        elif k == "mlp":
            f = c.ffn(l)
            out += _linear(name + ".fc1", i, h, f) + _linear(name + ".fc2", i, f, h)
        elif k == "block":
            f = c.ffn(l)
            out += _norm(name + ".ln1", i, h, False)
            out += _linear(name + ".attn.qkv", i, h, 3 * h) + _linear(name + ".attn.proj", i, h, h)
            out += _norm(name + ".ln2", i, h, False)
            out += _linear(name + ".mlp.fc1", i, h, f) + _linear(name + ".mlp.fc2", i, f, h)
    return out


def drop_sites(c: Case) -> List[DropSite]:
    """Every dropout draw of one microbatch's forward, in forward order (p = 0 draws nothing)."""
    out: List[DropSite] = []
    T, h = c.tokens, c.hidden
    for i, l in enumerate(c.layers):
        if l.dropout <= 0.0:
            continue
        name = f"{l.kind}{i}"
        if l.kind == "dropout":
            out.append(DropSite(name, "dropout", T * h, l.dropout, i))
        elif l.kind == "attention":
            out.append(DropSite(name + ".core", "attn_dropout", l.heads * T * T, l.dropout, i))
        elif l.kind == "mlp":
            out.append(DropSite(name + ".dropout", "dropout", T * h, l.dropout, i))
        elif l.kind == "block":
            out.append(DropSite(name + ".attn.core", "attn_dropout", l.heads * T * T, l.dropout, i))
            out.append(DropSite(name + ".drop1", "dropout", T * h, l.dropout, i))
            out.append(DropSite(name + ".mlp.dropout", "dropout", T * h, l.dropout, i))
    return out
