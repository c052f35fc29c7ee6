"""Every supported call of the chorus backend against gloo's result on the same inputs.

One launch per world size (2, 3, 4) runs every case on each rank, through a chorus default group
and a gloo group side by side; each case is then one pytest test (test_matches_gloo[np3-...]).
Inputs are unique per rank and element, odd-sized, and small integers where a reduction's result
must not depend on the order of the additions, so results compare bit for bit. Each result is
also checked against a reference computed locally from every rank's inputs. Where torch 1.13's
gloo lacks the call (all_gather_into_tensor, reduce_scatter, all_to_all of lists) the gloo result
comes from the gloo calls that compose it; where it lacks the type or operator (bfloat16, bool,
int16, ReduceOp.AVG) only the local reference applies.
"""
import functools

import pytest

from harness import run_ranks, values

WORLD_SIZES = [2, 3, 4]
SIZES = [1, 37, 4099]   # elements: odd, and one past a page of floats


# ---------------------------------------------------------------------------------------- inputs
def data(rank, numel, dtype, op="sum", salt=0):
    import torch
    i = torch.arange(numel, dtype=torch.int64)
    if op == "product":   # +-1 and +-2: products of 4 ranks stay exact even in int8 and bfloat16
        v = (i * 7 + rank * 3 + salt) % 2 + 1
        if dtype not in (torch.uint8, torch.bool):
            v = torch.where((i + rank + salt) % 5 == 0, -v, v)
    else:
        v = (i * 7 + rank * 13 + salt) % 11 - 5
        if dtype == torch.uint8:
            v = v + 5
    if dtype == torch.bool:
        return v > 0
    return v.to(dtype)


def dtypes():
    import torch
    return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
            torch.int32, torch.int64]


def name(dtype):
    return str(dtype).replace("torch.", "")


def local_reduce(tensors, op):
    """The reduction of the ranks' tensors, computed here (in float64 / int64)."""
    import torch
    wide = [t.to(torch.float64 if t.is_floating_point() else torch.int64) for t in tensors]
    out = wide[0].clone()
    for t in wide[1:]:
        if op in ("sum", "avg"):
            out += t
        elif op == "product":
            out *= t
        elif op == "min":
            out = torch.minimum(out, t)
        elif op == "max":
            out = torch.maximum(out, t)
    if op == "avg":
        out = out / len(tensors) if out.is_floating_point() else torch.div(out, len(tensors),
                                                                           rounding_mode="trunc")
    return out.to(tensors[0].dtype)


def same(got, want, what, tol=0.0):
    import torch
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError("%s: got %s %s, expected %s %s" % (what, got.dtype, tuple(got.shape),
                                                              want.dtype, tuple(want.shape)))
    if tol == 0.0:
        ok = torch.equal(got, want)
    else:
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    if not ok:
        bad = (got != want).nonzero()
        i = tuple(bad[0].tolist()) if len(bad) else ()
        raise AssertionError("%s: differs at %d elements, first %s: got %s, expected %s" % (
            what, len(bad), i, got[i].item() if len(bad) else got, want[i].item() if len(bad) else want))


# ----------------------------------------------------------------------------------------- cases
# Each case runs on every rank: case(rank, n, chorus_group, gloo_group); raises on a mismatch.
CASES = {}


def case(name):
    def add(fn):
        CASES[name] = fn
        return fn
    return add


def gloo_has(dtype, op="sum"):
    """Whether torch 1.13's gloo runs this type and operator (an unsupported one fails on a later
    call of the group too, so it is never tried)."""
    import torch
    return dtype not in (torch.bfloat16, torch.bool, torch.int16) and op != "avg"


def both(fn, chorus, gloo, gloo_fn=None, use_gloo=True):
    """fn(group) on the chorus group, and gloo_fn (default fn) on the gloo group when use_gloo;
    returns (chorus result, gloo result or None)."""
    got = fn(chorus)
    ref = (gloo_fn or fn)(gloo) if use_gloo else None
    return got, ref


def reduce_op(op):
    import torch.distributed as dist
    return {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
            "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}[op]


def tolerance(dtype, op):
    """Exact, except the division of avg (computed in float64 here)."""
    import torch
    if op != "avg" or not dtype.is_floating_point:
        return 0.0
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)


def all_reduce_case(dtype, op):
    def run(rank, n, chorus, gloo):
        import torch.distributed as dist
        for numel in SIZES:
            def call(group):
                t = data(rank, numel, dtype, op)
                dist.all_reduce(t, op=reduce_op(op), group=group)
                return t
            got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype, op))
            want = local_reduce([data(r, numel, dtype, op) for r in range(n)], op)
            same(got, want, "numel %d vs the local reduction" % numel, tolerance(dtype, op))
            if ref is not None:
                same(got, ref, "numel %d vs gloo" % numel, tolerance(dtype, op))
    return run


def _register_all_reduce():
    for op in ["sum", "product", "min", "max", "avg"]:
        for dt in ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]:
            CASES["all_reduce-%s-%s" % (op, dt)] = functools.partial(_all_reduce_by_name, dt, op)


def _all_reduce_by_name(dt, op, rank, n, chorus, gloo):
    import torch
    return all_reduce_case(getattr(torch, dt), op)(rank, n, chorus, gloo)


_register_all_reduce()


@case("all_reduce-async")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    ts = [data(rank, 1000 + k, torch.float32, salt=k) for k in range(4)]
    works = [dist.all_reduce(t, group=chorus, async_op=True) for t in ts]
    for k, w in enumerate(works):
        w.wait()
        assert w.is_completed()
        same(ts[k], local_reduce([data(r, 1000 + k, torch.float32, salt=k) for r in range(n)],
                                 "sum"), "async all_reduce %d" % k)


@case("all_reduce-noncontiguous")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist

    def call(group):
        base = data(rank, 35, torch.float32).view(5, 7)
        t = base.t()                 # a view with strides (1, 7)
        assert not t.is_contiguous()
        dist.all_reduce(t, group=group)
        return base
    got, ref = both(call, chorus, gloo)
    same(got, ref, "transposed view")


@case("all_reduce-complex")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist

    def call(group):
        t = torch.complex(data(rank, 37, torch.float32), data(rank, 37, torch.float32, salt=3))
        dist.all_reduce(t, group=group)
        return t
    got, ref = both(call, chorus, gloo)
    same(got, ref, "complex64 sum")
    parts = [torch.complex(data(r, 37, torch.float32), data(r, 37, torch.float32, salt=3))
             for r in range(n)]
    same(got, sum(parts[1:], parts[0]), "complex64 sum vs local")


@case("all_reduce_coalesced")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist

    def call(group):
        ts = [data(rank, 37, torch.float32), data(rank, 5, torch.float32, salt=1).view(5, 1)]
        dist.all_reduce_coalesced(ts, group=group)
        return torch.cat([t.reshape(-1) for t in ts])
    got, ref = both(call, chorus, gloo)
    same(got, ref, "coalesced")
    same(got, local_reduce([torch.cat([data(r, 37, torch.float32), data(r, 5, torch.float32, salt=1)])
                            for r in range(n)], "sum"), "coalesced vs local")


@case("broadcast")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in dtypes() + [torch.bool, torch.int16, torch.complex64]:
        for root in range(n):
            def call(group):
                t = data(rank, 37, dtype, salt=root) if dtype != torch.complex64 else \
                    torch.complex(data(rank, 37, torch.float32), data(rank, 37, torch.float32, salt=1))
                dist.broadcast(t, src=root, group=group)
                return t
            got, ref = both(call, chorus, gloo,
                            use_gloo=gloo_has(dtype) and dtype != torch.complex64)
            if ref is not None:
                same(got, ref, "%s root %d vs gloo" % (name(dtype), root))
            if dtype != torch.complex64:
                same(got, data(root, 37, dtype, salt=root), "%s root %d" % (name(dtype), root))


@case("reduce")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype, op in [(torch.float32, "sum"), (torch.float64, "max"), (torch.bfloat16, "product"),
                      (torch.int64, "min"), (torch.int32, "sum"), (torch.float16, "avg")]:
        for root in range(n):
            def call(group):
                t = data(rank, 37, dtype, op)
                dist.reduce(t, dst=root, op=reduce_op(op), group=group)
                return t
            got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype, op))
            if rank == root:
                want = local_reduce([data(r, 37, dtype, op) for r in range(n)], op)
                same(got, want, "%s %s root %d" % (name(dtype), op, root), tolerance(dtype, op))
                if ref is not None:
                    same(got, ref, "%s %s root %d vs gloo" % (name(dtype), op, root))


@case("all_gather")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in dtypes() + [torch.bool]:
        for numel in SIZES:
            def call(group):
                out = [torch.zeros(numel, dtype=dtype) for _ in range(n)]
                dist.all_gather(out, data(rank, numel, dtype), group=group)
                return torch.stack(out)
            got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype))
            same(got, torch.stack([data(r, numel, dtype) for r in range(n)]),
                 "%s numel %d" % (name(dtype), numel))
            if ref is not None:
                same(got, ref, "%s numel %d vs gloo" % (name(dtype), numel))


@case("all_gather-noncontiguous")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist

    def call(group):
        big = torch.zeros(7, 2 * n)
        out = [big[:, 2 * r] for r in range(n)]     # strided columns
        dist.all_gather(out, data(rank, 7, torch.float32).t(), group=group)
        return big
    got, ref = both(call, chorus, gloo)
    same(got, ref, "strided outputs")


@case("all_gather_into_tensor")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.bfloat16, torch.int64]:
        for numel in SIZES:
            def call(group):
                out = torch.zeros(n * numel, dtype=dtype)
                dist.all_gather_into_tensor(out, data(rank, numel, dtype), group=group)
                return out

            def composed(group):
                out = [torch.zeros(numel, dtype=dtype) for _ in range(n)]
                dist.all_gather(out, data(rank, numel, dtype), group=group)
                return torch.cat(out)
            got, ref = both(call, chorus, gloo, composed, use_gloo=gloo_has(dtype))
            same(got, torch.cat([data(r, numel, dtype) for r in range(n)]),
                 "%s numel %d" % (name(dtype), numel))
            if ref is not None:
                same(got, ref, "%s numel %d vs gloo" % (name(dtype), numel))
    # In place: the input is this rank's block of the output.
    out = torch.zeros(n * 37)
    block = out.narrow(0, rank * 37, 37)
    block.copy_(data(rank, 37, torch.float32))
    dist.all_gather_into_tensor(out, block, group=chorus)
    same(out, torch.cat([data(r, 37, torch.float32) for r in range(n)]), "in place")


def reduce_scatter_inputs(rank, n, numel, dtype, op):
    return [data(rank, numel, dtype, op, salt=j) for j in range(n)]


@case("reduce_scatter")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype, op in [(torch.float32, "sum"), (torch.float64, "max"), (torch.int32, "min"),
                      (torch.bfloat16, "product"), (torch.float32, "avg"), (torch.int64, "sum")]:
        for numel in SIZES:
            def call(group):
                out = torch.zeros(numel, dtype=dtype)
                dist.reduce_scatter(out, reduce_scatter_inputs(rank, n, numel, dtype, op),
                                    op=reduce_op(op), group=group)
                return out

            def composed(group):   # all_reduce, then this rank's block
                t = torch.cat(reduce_scatter_inputs(rank, n, numel, dtype, op))
                dist.all_reduce(t, op=reduce_op(op), group=group)
                return t[rank * numel:(rank + 1) * numel].clone()
            got, ref = both(call, chorus, gloo, composed, use_gloo=gloo_has(dtype, op))
            want = local_reduce([reduce_scatter_inputs(r, n, numel, dtype, op)[rank]
                                 for r in range(n)], op)
            same(got, want, "%s %s numel %d" % (name(dtype), op, numel), tolerance(dtype, op))
            if ref is not None:
                same(got, ref, "%s %s numel %d vs gloo" % (name(dtype), op, numel))


@case("reduce_scatter_tensor")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype, op in [(torch.float32, "sum"), (torch.float16, "max"), (torch.int64, "product")]:
        for numel in SIZES:
            def call(group):
                out = torch.zeros(numel, dtype=dtype)
                inp = torch.cat(reduce_scatter_inputs(rank, n, numel, dtype, op))
                dist.reduce_scatter_tensor(out, inp, op=reduce_op(op), group=group)
                return out

            def composed(group):
                t = torch.cat(reduce_scatter_inputs(rank, n, numel, dtype, op))
                dist.all_reduce(t, op=reduce_op(op), group=group)
                return t[rank * numel:(rank + 1) * numel].clone()
            got, ref = both(call, chorus, gloo, composed, use_gloo=gloo_has(dtype, op))
            want = local_reduce([reduce_scatter_inputs(r, n, numel, dtype, op)[rank]
                                 for r in range(n)], op)
            same(got, want, "%s %s numel %d" % (name(dtype), op, numel))
            if ref is not None:
                same(got, ref, "%s %s numel %d vs gloo" % (name(dtype), op, numel))


@case("gather")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.float16, torch.int8, torch.bool]:
        for root in range(n):
            def call(group):
                out = [torch.zeros(37, dtype=dtype) for _ in range(n)] if rank == root else None
                dist.gather(data(rank, 37, dtype, salt=root), out, dst=root, group=group)
                return torch.stack(out) if out else None
            got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype))
            if rank == root:
                same(got, torch.stack([data(r, 37, dtype, salt=root) for r in range(n)]),
                     "%s root %d" % (name(dtype), root))
                if ref is not None:
                    same(got, ref, "%s root %d vs gloo" % (name(dtype), root))


@case("scatter")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.float64, torch.uint8, torch.int16]:
        for root in range(n):
            def call(group):
                out = torch.zeros(37, dtype=dtype)
                src = [data(root, 37, dtype, salt=j) for j in range(n)] if rank == root else None
                dist.scatter(out, src, src=root, group=group)
                return out
            got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype))
            same(got, data(root, 37, dtype, salt=rank), "%s root %d" % (name(dtype), root))
            if ref is not None:
                same(got, ref, "%s root %d vs gloo" % (name(dtype), root))


@case("all_to_all_single-equal")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        def call(group):
            inp = data(rank, 3 * n * 5, dtype).view(3 * n, 5)
            out = torch.zeros(3 * n, 5, dtype=dtype)
            dist.all_to_all_single(out, inp, group=group)
            return out
        got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype))
        want = torch.cat([data(r, 3 * n * 5, dtype).view(3 * n, 5)[3 * rank:3 * rank + 3]
                          for r in range(n)])
        same(got, want, name(dtype))
        if ref is not None:
            same(got, ref, "%s vs gloo" % name(dtype))


def uneven_rows(src, dst):
    """Rows rank src sends to rank dst: uneven, some zero."""
    return (src * 3 + dst * 2) % 4


@case("all_to_all_single-uneven")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.int16, torch.float64]:
        in_splits = [uneven_rows(rank, j) for j in range(n)]
        out_splits = [uneven_rows(j, rank) for j in range(n)]

        def rows(r):
            return data(r, sum(uneven_rows(r, j) for j in range(n)) * 3, dtype, salt=r).view(-1, 3)

        def call(group):
            out = torch.full((sum(out_splits), 3), 99).to(dtype)
            dist.all_to_all_single(out, rows(rank), out_splits, in_splits, group=group)
            return out
        got, ref = both(call, chorus, gloo, use_gloo=gloo_has(dtype))
        want = torch.cat([rows(r).split([uneven_rows(r, j) for j in range(n)])[rank]
                          for r in range(n)])
        same(got, want, name(dtype))
        if ref is not None:
            same(got, ref, "%s vs gloo" % name(dtype))


@case("all_to_all-list")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist

    def call(group):
        inp = [data(rank, uneven_rows(rank, j) * 5 + 1, torch.float32, salt=j) for j in range(n)]
        out = [torch.zeros(uneven_rows(j, rank) * 5 + 1) for j in range(n)]
        dist.all_to_all(out, inp, group=group)
        return torch.cat(out)

    def composed(group):   # one all_to_all_single with the blocks' sizes as splits
        inp = [data(rank, uneven_rows(rank, j) * 5 + 1, torch.float32, salt=j) for j in range(n)]
        out = torch.zeros(sum(uneven_rows(j, rank) * 5 + 1 for j in range(n)))
        dist.all_to_all_single(out, torch.cat(inp), [uneven_rows(j, rank) * 5 + 1 for j in range(n)],
                               [t.numel() for t in inp], group=group)
        return out
    got, ref = both(call, chorus, gloo, composed)
    want = torch.cat([data(j, uneven_rows(j, rank) * 5 + 1, torch.float32, salt=rank)
                      for j in range(n)])
    same(got, want, "uneven list")
    if ref is not None:
        same(got, ref, "uneven list vs gloo")


@case("barrier")
def _(rank, n, chorus, gloo):
    import torch.distributed as dist
    for _ in range(5):
        dist.barrier(group=chorus)
    dist.barrier(group=chorus, async_op=True).wait()


@case("send_recv")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    for dtype in [torch.float32, torch.int64, torch.bool, torch.bfloat16]:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        out = torch.zeros(37, dtype=dtype)
        # Even ranks send first, odd ranks receive first; the last rank of an odd ring waits.
        if rank % 2 == 0 and not (n % 2 == 1 and rank == n - 1):
            dist.send(data(rank, 37, dtype), nxt, group=chorus)
            dist.recv(out, prv, group=chorus)
        else:
            dist.recv(out, prv, group=chorus)
            dist.send(data(rank, 37, dtype), nxt, group=chorus)
        same(out, data(prv, 37, dtype), name(dtype))


@case("isend_irecv")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    # Rank 0 sends to everyone, everyone answers; small messages.
    if rank == 0:
        works = [dist.isend(data(0, 37, torch.float32, salt=j), j, group=chorus) for j in range(1, n)]
        outs = [torch.zeros(37) for _ in range(1, n)]
        works += [dist.irecv(outs[j - 1], j, group=chorus) for j in range(1, n)]
        for w in works:
            w.wait()
        for j in range(1, n):
            same(outs[j - 1], data(j, 37, torch.float32), "from %d" % j)
    else:
        out = torch.zeros(37)
        w = dist.irecv(out, 0, group=chorus)
        w.wait()
        same(out, data(0, 37, torch.float32, salt=rank), "from 0")
        dist.isend(data(rank, 37, torch.float32), 0, group=chorus).wait()


@case("isend_irecv-exchange")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    # Every rank isends to the next and irecvs from the previous, in that order, 4 MiB each:
    # chorus sends complete only when taken, so the backend must run the two together.
    for numel in [37, 1 << 20]:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        out = torch.zeros(numel)
        works = [dist.isend(data(rank, numel, torch.float32), nxt, group=chorus),
                 dist.irecv(out, prv, group=chorus)]
        for w in works:
            w.wait()
        same(out, data(prv, numel, torch.float32), "numel %d" % numel)


@case("batch_isend_irecv")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    # A ring exchange of 4 MiB each way: every rank sends and receives at once.
    for numel in [37, 1 << 20]:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        out = torch.zeros(numel)
        ops = [dist.P2POp(dist.isend, data(rank, numel, torch.float32), nxt, group=chorus),
               dist.P2POp(dist.irecv, out, prv, group=chorus)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(out, data(prv, numel, torch.float32), "numel %d" % numel)


@case("send_recv-self")
def _(rank, n, chorus, gloo):
    import torch
    import torch.distributed as dist
    # To itself, as NCCL allows: blocking send then recv; a batch listing the receive first; an
    # isend + irecv pair held back together. A receive with nothing sent is refused.
    for numel in [0, 1, 37, 1 << 18]:
        out = torch.zeros(numel)
        dist.send(data(rank, numel, torch.float32), rank, group=chorus)
        dist.recv(out, rank, group=chorus)
        same(out, data(rank, numel, torch.float32), "send, recv, numel %d" % numel)
        out = torch.zeros(numel)
        ops = [dist.P2POp(dist.irecv, out, rank, group=chorus),
               dist.P2POp(dist.isend, data(rank, numel, torch.float32, salt=1), rank, group=chorus)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(out, data(rank, numel, torch.float32, salt=1), "batch, numel %d" % numel)
        out = torch.zeros(numel, dtype=torch.int64)
        works = [dist.isend(data(rank, numel, torch.int64, salt=2), rank, group=chorus),
                 dist.irecv(out, rank, group=chorus)]
        for w in works:
            w.wait()
        same(out, data(rank, numel, torch.int64, salt=2), "isend, irecv, numel %d" % numel)
    try:
        dist.recv(torch.zeros(3), rank, group=chorus)
    except Exception as e:
        assert type(e).__name__ == "InvalidArgument", "%s: %s" % (type(e).__name__, e)
    else:
        raise AssertionError("a receive from self with nothing sent was not refused")
    # The group still works.
    t = torch.ones(5)
    dist.all_reduce(t, group=chorus)
    same(t, torch.full((5,), float(n)), "all_reduce after")


# --------------------------------------------------------------------------------------- driver
def run_cases(rank, n):
    """On each rank: every case with a chorus default group and a gloo group."""
    import torch.distributed as dist
    chorus = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    assert dist.get_backend(chorus) == "chorus"
    failures = {}
    for case_name, fn in CASES.items():
        try:
            fn(rank, n, chorus, gloo)
        except Exception as e:  # one case's failure must not hide the others
            failures[case_name] = "%s: %s" % (type(e).__name__, e)
        dist.barrier(group=gloo)   # the ranks start each case together
    return failures


@functools.lru_cache(maxsize=None)
def results_for(n):
    return values(run_ranks(run_cases, n, timeout=240, pg_timeout_s=60))


@pytest.mark.parametrize("n", WORLD_SIZES, ids=lambda n: "np%d" % n)
@pytest.mark.parametrize("case_name", list(CASES))
def test_matches_gloo(n, case_name):
    failures = {r: f[case_name] for r, f in enumerate(results_for(n)) if case_name in f}
    assert not failures, "\n".join("rank %d: %s" % kv for kv in failures.items())
