"""The speed harness's shared parts (``SpeedTPGroup``, ``register_ops``, the timers) and a subprocess runner for
``bench/minimax_qk_norm.py``: time a tree's forward_qkv against a rewrite of the base's regressed path. The hidden
tests no longer use this runner (its timers run in the candidate's process); they time the base tree's own
forward_qkv against the candidate's from the judge (``qknorm_speed``).

Usage: python speed_runner.py <cases_json>, with the patched tree's import root and the probes folder on
PYTHONPATH. Prints one JSON object: per case the raw per-round samples of both; the judge computes the ratio and
checks the samples against its own wall clock (see the task README).

TorchDynamo is on here (unlike the subject, where the correctness probes run), so compiled code is really
compiled.

The baseline is the test's own reproduction of what the pinned base's forward_qkv does. It is written here
because the hidden tests are not told where the base tree is. Each part follows the base:
- forward_qkv calls a registered custom op, which pays the same dispatcher cost. The op's implementation
  checks for the fused all-reduce kernel and then calls a
- ``torch.compile(backend="inductor", dynamic=True)`` function with the same arguments (including tp_rank
  and tp_world as ints). It upcasts q and k to fp32 and takes the mean of squares. At tp_world > 1 it
  concatenates the two statistics, all-reduces their flattened view through the installed TP group (as
  vLLM's ``tensor_model_parallel_all_reduce`` does), divides by tp_world and chunks them again. Then it normalizes,
  applies the weights and casts back.
- v is split off outside the op.

The TP group is a stateless stand-in (``SpeedTPGroup``). Its all-reduce is an opaque registered op that
copies its input, like vLLM's own ``torch.ops.vllm.all_reduce``. Opaque matters in two ways:
- A Python all-reduce that updates counters (like the correctness tests' ``FakeTPGroup``) makes Dynamo
  guard on those counters. Every call then recompiles, until ``recompile_limit`` is reached and the base's
  function runs eagerly: about 10x slower than the base really is at tp > 1.
- An all-reduce that Inductor can see through (a plain ``clone``) lets it fuse the statistics and the
  normalization into one pass. A real all-reduce forbids that, so the base would look faster than it is.
Both the baseline and the candidate see this same group.

Candidate and baseline are measured in alternating rounds, so load on the machine (other candidates graded
at the same time, on the CPU or the same GPU) hits both alike. The judge's verdict uses an interval: the 95%
bootstrap confidence interval of median(candidate) / median(baseline), rounds resampled in pairs
(``bench/stats.py``).
``bench/minimax_qk_norm.py`` builds its trees' layers with this module's TP group and op, and times them with
``host_sample`` and ``capture_graph``.
Modes (the judge gives ``rounds``, ``inner`` and ``warmup`` per case; the defaults below otherwise):
- "host": wall time per call of ``inner`` back-to-back calls, then a synchronize (host-inclusive).
- "graph": device time per call, from one replay of a CUDA graph holding ``inner`` calls.
The baseline's compiles are counted. If it recompiled while being timed, or reached the recompile limit,
the case reports ``baseline_error`` (a harness problem, not the candidate's).
"""

import json
import statistics
import sys
import time
import traceback

LIB = "qknorm_speed"
ROUNDS = 60
HOST_INNER = 10
GRAPH_INNER = 20
WARMUP = 20

_LIBS = []  # a torch.library.Library must stay alive as long as its ops are used


def register_ops(torch, dispatch_key="CUDA"):
    """Define ``qknorm_speed::identity_all_reduce`` (opaque copy) once per process."""
    if hasattr(torch.ops, LIB) and hasattr(getattr(torch.ops, LIB), "identity_all_reduce"):
        return
    lib = torch.library.Library(LIB, "FRAGMENT")
    _LIBS.append(lib)
    lib.define("identity_all_reduce(Tensor x) -> Tensor")
    lib.impl("identity_all_reduce", lambda x: x.clone(), dispatch_key)
    torch.library.register_fake(f"{LIB}::identity_all_reduce", lambda x: torch.empty_like(x), lib=lib)


class SpeedTPGroup:
    """Stateless stand-in for vLLM's TP GroupCoordinator: the all-reduce is one opaque op (a copy)."""

    def __init__(self, world_size):
        import torch

        self._op = getattr(torch.ops, LIB).identity_all_reduce
        self.world_size = world_size
        self.rank_in_group = 0
        self.rank = 0
        self.local_rank = 0
        self.ranks = list(range(world_size))
        self.unique_name = "tp:speed"
        self.cpu_group = None
        self.device_group = None

    @property
    def is_first_rank(self):
        return True

    @property
    def is_last_rank(self):
        return self.world_size == 1

    def all_reduce(self, x):
        if self.world_size == 1:
            return x
        return self._op(x)

    def barrier(self):
        return None


def regressed_factory(torch, all_reduce, dispatch_key="CUDA", backend=None, name="regressed_qk_norm"):
    """The base's regressed forward_qkv path, rewritten by the test (see the module docstring).

    ``all_reduce(t)`` all-reduces through the installed group, like vLLM's ``tensor_model_parallel_all_reduce``
    (the test's own, so the candidate's tree cannot change the baseline). ``backend`` defaults to Inductor,
    with a count of compiles. Returns ``(call, stats)``:
    ``call(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps) -> (q, k, v)``.
    """
    stats = {"compiles": 0}

    def counting_inductor(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        stats["compiles"] += 1
        return compile_fx(gm, example_inputs)

    def reduce_statistics(stat):
        return all_reduce(stat.flatten()).view_as(stat)

    @torch.compile(backend=backend or counting_inductor, dynamic=True)
    def regressed(qkv, q_weight, k_weight, q_size: int, kv_size: int, tp_rank: int, tp_world: int, eps: float):
        q, k, _ = qkv.split([q_size, kv_size, kv_size], dim=-1)
        dt = q.dtype
        qf = q.to(torch.float32)
        kf = k.to(torch.float32)
        q_ms = qf.pow(2).mean(dim=-1, keepdim=True)
        k_ms = kf.pow(2).mean(dim=-1, keepdim=True)
        if tp_world > 1:
            both = torch.cat([q_ms, k_ms], dim=-1)
            both = reduce_statistics(both) / tp_world
            q_ms, k_ms = both.chunk(2, dim=-1)
        qo = qf * torch.rsqrt(q_ms + eps) * q_weight
        ko = kf * torch.rsqrt(k_ms + eps) * k_weight
        return qo.to(dt), ko.to(dt)

    def op_impl(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps, workspace):
        assert qkv.ndim == 2
        if workspace is not None and tp_world > 1 and qkv.shape[0] <= 2048:
            raise AssertionError("the fused all-reduce kernel is never available to the speed test")
        return regressed(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps)

    def op_fake(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps, workspace):
        n = qkv.shape[0]
        return (torch.empty([n, q_size], dtype=qkv.dtype, device=qkv.device),
                torch.empty([n, kv_size], dtype=qkv.dtype, device=qkv.device))

    lib = torch.library.Library(LIB, "FRAGMENT")
    _LIBS.append(lib)
    lib.define(f"{name}(Tensor qkv, Tensor q_weight, Tensor k_weight, SymInt q_size, SymInt kv_size, "
               "SymInt tp_rank, SymInt tp_world, float eps, Tensor? workspace) -> (Tensor, Tensor)")
    lib.impl(name, op_impl, dispatch_key)
    torch.library.register_fake(f"{LIB}::{name}", op_fake, lib=lib)
    op = getattr(getattr(torch.ops, LIB), name)

    def call(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps):
        assert qkv.ndim == 2
        q, k = op(qkv, q_weight, k_weight, q_size, kv_size, tp_rank, tp_world, eps, None)
        _, _, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        return q, k, v

    return call, stats


def failure_text(limit=2000):
    """The exception being handled: its type and the start of its message (a dispatcher error names the op and
    the backend in its first line, then lists every backend), then the end of the stack."""
    exc = sys.exc_info()[1]
    head = f"{type(exc).__name__}: {str(exc)[:600]}"
    stack = "".join(traceback.format_tb(exc.__traceback__))
    return (head + "\n" + stack[-(limit - len(head) - 1):])[:limit]


def _warm(torch, fns, n):
    for fn in fns:
        for _ in range(n):
            fn()
    torch.cuda.synchronize()


def host_sample(torch, fn, inner=HOST_INNER, sync=None):
    """Per-call host-inclusive microseconds of one sample: ``inner`` back-to-back calls, then a synchronize
    (``sync``, by default the CUDA device's; the benchmark's CPU smoke run passes a no-op)."""
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    (sync or torch.cuda.synchronize)()
    return (time.perf_counter() - t0) * 1e6 / inner


def capture_graph(torch, fn, inner=GRAPH_INNER):
    """A CUDA graph holding ``inner`` calls of ``fn`` (captured on a side stream after one eager call)."""
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(inner):
                fn()
    torch.cuda.synchronize()
    return graph


def graph_sample(torch, graph, inner=GRAPH_INNER):
    """Per-call device microseconds of one replay of ``graph`` (``inner`` calls), timed with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / inner


def _alternating(rounds, count):
    """Round r visits the fns forward when r is even, backward when odd (neither is always first)."""
    for r in range(rounds):
        yield from (range(count) if r % 2 == 0 else reversed(range(count)))


def time_host(torch, fns, rounds=ROUNDS, inner=HOST_INNER, warmup=WARMUP):
    """Per-call host-inclusive microseconds of each fn, sampled in alternating rounds."""
    _warm(torch, fns, warmup)
    samples = [[] for _ in fns]
    for i in _alternating(rounds, len(fns)):
        samples[i].append(host_sample(torch, fns[i], inner))
    return samples


def time_graph(torch, fns, rounds=ROUNDS, inner=GRAPH_INNER, warmup=WARMUP):
    """Per-call device microseconds of each fn (CUDA graph replay), sampled in alternating rounds."""
    _warm(torch, fns, warmup)
    graphs = [capture_graph(torch, fn, inner) for fn in fns]
    for g in graphs:
        for _ in range(5):
            g.replay()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    for i in _alternating(rounds, len(fns)):
        samples[i].append(graph_sample(torch, graphs[i], inner))
    return samples


def compare(base_samples, cand_samples):
    """The raw samples (per-call microseconds, one per round); medians only for the log, the judge recomputes."""
    return {
        "regressed_samples_us": list(base_samples),
        "candidate_samples_us": list(cand_samples),
        "regressed_us": statistics.median(base_samples),
        "candidate_us": statistics.median(cand_samples),
    }


def main():
    # This process is not the subject: install the stand-ins the subject has (without them vLLM does not import
    # on a GPU machine).
    import vllm_stand_ins

    vllm_stand_ins.prepare_process()
    cases_json = sys.argv[1]
    out = {"env_error": None, "import_error": None, "cases": {}}
    try:
        import torch
        import torch._dynamo.config as dynamo_config

        assert torch.cuda.is_available(), "no CUDA device"
        import qknorm_sim as sim

        register_ops(torch)
        import vllm.config  # noqa: F401
    except Exception:
        out["env_error"] = traceback.format_exc()[-3000:]
        print(json.dumps(out))
        return
    with sim.rms_norm_tp_module(out) as mod:
        if mod is None:
            print(json.dumps(out))
            return
        current = {}
        regressed, stats = regressed_factory(torch, lambda t: current["group"].all_reduce(t))
        limit = int(getattr(dynamo_config, "recompile_limit", getattr(dynamo_config, "cache_size_limit", 8)))
        for case in json.loads(cases_json):
            name, q, kv, tp, tokens, mode = (
                case["name"], case["q"], case["kv"], case["tp"], case["tokens"], case["mode"]
            )
            rec = {"mode": mode}
            out["cases"][name] = rec
            try:
                torch.manual_seed(0)
                current["group"] = SpeedTPGroup(tp)
                with sim.installed_group(current["group"]):
                    q_norm = mod.MiniMaxText01RMSNormTP(q * tp, eps=1e-6)
                    k_norm = mod.MiniMaxText01RMSNormTP(kv * tp, eps=1e-6)
                    with torch.no_grad():
                        q_norm.weight.data = torch.rand(q, device="cuda", dtype=torch.bfloat16) + 0.5
                        k_norm.weight.data = torch.rand(kv, device="cuda", dtype=torch.bfloat16) + 0.5
                    qkv = torch.randn(tokens, q + 2 * kv, device="cuda", dtype=torch.bfloat16)
                    qw, kw = q_norm.weight, k_norm.weight

                    def cand():
                        return mod.MiniMaxText01RMSNormTP.forward_qkv(q_norm, k_norm, qkv, q, kv)

                    def base():
                        return regressed(qkv, qw, kw, q, kv, 0, tp, 1e-6)

                    timer = time_host if mode == "host" else time_graph
                    inner = int(case.get("inner", HOST_INNER if mode == "host" else GRAPH_INNER))
                    rec["inner"] = inner
                    with torch.no_grad():
                        try:  # compile the baseline outside the timed rounds
                            base()
                            torch.cuda.synchronize()
                        except Exception:
                            rec["baseline_error"] = failure_text()
                            continue
                        before = stats["compiles"]
                        try:
                            cand()
                            torch.cuda.synchronize()
                            samples = timer(torch, [base, cand], rounds=int(case.get("rounds", ROUNDS)),
                                            inner=inner, warmup=int(case.get("warmup", WARMUP)))
                        except Exception:
                            rec["error"] = failure_text()
                            continue
                    rec.update(compare(samples[0], samples[1]))
                    if stats["compiles"] != before:
                        rec["baseline_error"] = (f"the regressed path compiled {stats['compiles'] - before} more "
                                                 "time(s) while being timed")
                    elif stats["compiles"] >= limit:
                        rec["baseline_error"] = f"the regressed path reached Dynamo's recompile limit ({limit})"
            except Exception:
                rec["error"] = failure_text()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
