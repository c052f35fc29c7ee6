"""DDP training of a GPT-2 style model over chorus and over gloo from the same seed: the same
losses (within 1e-6 relative; with 2 ranks the sums are exact, so they are in fact equal) and, on
each backend, the same parameters on every rank afterwards."""
import importlib.util
import os

import pytest

from harness import run_ranks, values

STEPS = 20
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# The CPU anchor lives beside the repository, not in it; a clean clone may not have it.
ANCHOR = os.path.join(REPO, "..", "shared", "anchors", "torch_gpt", "gpt_step.py")


def anchor_gpt():
    spec = importlib.util.spec_from_file_location("gpt_step", ANCHOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GPT


def ddp_rank(rank, n, bucket_cap_mb, use_anchor):
    import torch
    import torch.distributed as dist
    import train_gpt
    model_cls = anchor_gpt() if use_anchor else train_gpt.GPT
    losses, checksum, flat = train_gpt.train(steps=STEPS, bucket_cap_mb=bucket_cap_mb,
                                             model_cls=model_cls)
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    return {"losses": losses, "checksum": checksum, "identical": bool(torch.equal(ref, flat))}


def train_both(bucket_cap_mb=None, use_anchor=False):
    out = {}
    for backend in ("chorus", "gloo"):
        out[backend] = values(run_ranks(ddp_rank, 2, backend=backend, timeout=180,
                                        args=(bucket_cap_mb, use_anchor)))
    return out


def check(out):
    for backend, ranks in out.items():
        for r, res in enumerate(ranks):
            assert res["identical"], "%s: rank %d's parameters differ from rank 0's" % (backend, r)
            assert res["losses"][-1] < res["losses"][0], "%s: the loss did not fall" % backend
    for r in range(2):
        a, b = out["chorus"][r]["losses"], out["gloo"][r]["losses"]
        assert len(a) == len(b) == STEPS
        for step, (x, y) in enumerate(zip(a, b)):
            assert abs(x - y) <= 1e-6 * abs(y), \
                "rank %d step %d: chorus loss %.9g, gloo %.9g" % (r, step, x, y)


@pytest.mark.parametrize("bucket_cap_mb", [None, 0.05], ids=["default_buckets", "many_buckets"])
def test_ddp_gpt_same_losses_as_gloo(bucket_cap_mb):
    check(train_both(bucket_cap_mb))


@pytest.mark.skipif(not os.path.exists(ANCHOR), reason="the anchor (../shared/anchors/torch_gpt) "
                    "is not beside this checkout; test_ddp_gpt_same_losses_as_gloo covers the "
                    "same architecture")
def test_ddp_anchor_gpt_same_losses_as_gloo():
    check(train_both(use_anchor=True))
