"""PyTorch integration: CUDA tensor ops and tensor-parallel layers.

- `Comm.from_process_group(group)` / `comm_from_process_group`: a GPU comm
  sharing the ncclComm_t of a torch.distributed NCCL process group.
- Functional ops on CUDA tensors, enqueued on the current stream and
  registered as opaque custom ops (torch.ops.commgemm.*) with fake kernels,
  so torch.compile keeps them in the graph:
  `all_gather_matmul`, `matmul_reduce_scatter`, `matmul_all_reduce`,
  `bulk_matmul_collective`. The first three are differentiable.
- `ColumnParallelLinear`, `RowParallelLinear`: Megatron-style layers whose
  forward and backward run the overlapped ops.

The custom ops themselves (tensor -> cgm_matrix, stream, fake kernels) are
in _torch_ops.py, the autograd Functions of the layers' math in
_torch_autograd.py. CPU tensors work too, on a host-backend comm (Comm.local).

Rows are sharded with the ceil split: rank r holds shard_rows(m, r, P) rows
(the last shards may be smaller or empty). Tensors are 2-D [rows, features];
layers accept [..., features] and flatten the leading dimensions into rows.

Everything is CUDA-graph capturable after one eager call with the same shapes
(outputs come from the caching allocator, which draws from the graph's pool
during capture; the C library allocates nothing inside capture).
"""

import math

import torch
import torch.distributed as dist

from . import _lib
from ._lib import Status
from ._torch_autograd import (_AllGatherMatmul, _BiasSummedOverRanks, _LinearAllReduceGrad, _MatmulAllReduce,
                              _MatmulReduceScatter)
from ._torch_ops import _ops
from .core import Comm, Config

__all__ = ["comm_from_process_group", "all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce",
           "bulk_matmul_collective", "ColumnParallelLinear", "RowParallelLinear", "shard_rows"]

shard_rows = _lib.shard_rows

# --------------------------------------------------------------------------
# Comm from a process group
# --------------------------------------------------------------------------


def _pg_backend_name(group):
    try:
        return str(dist.get_backend(group))
    except Exception as e:  # noqa: BLE001 - reported below
        return f"unknown ({e})"


def nccl_comm_ptr(group=None):
    """The ncclComm_t (int) of `group` for the current CUDA device, created
    now if the process group has not made it yet (NCCL communicators are
    created lazily, on the first collective, unless init_process_group got a
    device_id)."""
    if not dist.is_available() or not dist.is_initialized():
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            "torch.distributed is not initialized; call torch.distributed.init_process_group(backend='nccl', "
            "device_id=torch.device('cuda', local_rank)) first")
    if group is None:
        group = dist.group.WORLD
    name = _pg_backend_name(group)
    if "nccl" not in name.lower():
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"commgemm's GPU backends need an NCCL communicator, but the process group uses {name}; create it "
            "with torch.distributed.init_process_group(backend='nccl') or new_group(backend='nccl'), or use "
            "commgemm.Comm.local() for the CPU host backend")
    bound = getattr(group, "bound_device_id", None)
    device = bound if bound is not None else torch.device("cuda", torch.cuda.current_device())
    if bound is not None and bound.index != torch.cuda.current_device():
        raise _lib.InvalidUsageError(
            Status.INVALID_USAGE,
            f"the process group is bound to {bound} but the current CUDA device is cuda:"
            f"{torch.cuda.current_device()}; call torch.cuda.set_device({bound.index}) first")
    try:
        backend = group._get_backend(device)
    except Exception as e:  # noqa: BLE001
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"the process group ({name}) has no backend for {device}: {e}; create it with backend='nccl'") from e
    if not hasattr(backend, "_comm_ptr"):
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"{type(backend).__name__} (torch {torch.__version__}) does not expose _comm_ptr(); commgemm needs "
            "torch >= 2.8 to share a process group's ncclComm_t, or create the ncclComm_t yourself and use "
            "commgemm.Comm.from_nccl(ptr)")

    def get_ptr():
        value = backend._comm_ptr  # a method; a property on some builds
        return int(value() if callable(value) else value)

    ptr = get_ptr()
    if ptr == 0:
        # Lazily created communicator: one tiny collective on this device makes it.
        t = torch.zeros(1, device=device)
        dist.all_reduce(t, group=group)
        torch.cuda.synchronize(device)
        ptr = get_ptr()
    if ptr == 0:
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"the process group's NCCL communicator for {device} does not exist even after a collective; is "
            f"the current device (cuda:{torch.cuda.current_device()}) the one this rank uses?")
    return ptr


def comm_from_process_group(group=None, config=None, **config_kwargs):
    """A GPU commgemm.Comm on the ncclComm_t of `group` (default: the world
    group), which must use NCCL. Collective over the group's ranks. The group
    must outlive the Comm (the Comm holds a reference; close the Comm before
    torch.distributed.destroy_process_group). Tip: give commgemm a group of its
    own (new_group(backend='nccl')) so its NCCL work never interleaves with
    other collectives on the same communicator."""
    ptr = nccl_comm_ptr(group)
    return Comm.from_nccl(ptr, config=Config.coerce(config, **config_kwargs),
                          keepalive=group if group is not None else dist.group.WORLD)


# --------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------


def _backend_arg(backend):
    if backend is None:
        return ""
    if isinstance(backend, str):
        return backend
    return _lib.backend_name(backend)


def _partial_dtype_arg(value):
    """A custom op's partial_dtype: "" (the comm's), "fp32" or "output"."""
    pd = _lib.parse_partial_dtype(value)
    return "" if pd == _lib.PartialDtype.DEFAULT else _lib.partial_dtype_name(pd)


def _gemm_reduction_arg(value):
    """A custom op's gemm_reduction: "" (the comm's), "any" or "fp32"."""
    gr = _lib.parse_gemm_reduction(value)
    return "" if gr == _lib.GemmReduction.DEFAULT else _lib.gemm_reduction_name(gr)


def _comm_arg(comm):
    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a commgemm.Comm, got {type(comm).__name__}")
    return comm.id


def _check_2d(name, t):
    if t.dim() != 2:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{name} has shape {tuple(t.shape)}: expected 2-D [rows, features]")


def _autocast(x, weight, bias):
    """Under torch.autocast, the floating inputs cast to its dtype (as F.linear's
    GEMM is), recorded by autograd: the op and its backward then see one dtype,
    and the gradients reach fp32 parameters as fp32. Unchanged otherwise."""
    dev = x.device.type
    if not torch.is_autocast_enabled(dev):
        return x, weight, bias
    dt = torch.get_autocast_dtype(dev)
    return tuple(t.to(dt) if t is not None and t.is_floating_point() else t for t in (x, weight, bias))


def all_gather_matmul(x_shard, weight, bias=None, *, comm, m=None, backend=None, return_gathered=False,
                      partial_dtype=None, gemm_reduction=None):
    """Y[m, n_loc] = allgather(x_shard) . weight^T (+ bias), on the current CUDA stream.

    x_shard: [m_r, k], this rank's rows (m_r = shard_rows(m, rank, P)). weight: [n_loc, k] (this
    rank's nn.Linear weight shard). bias: [n_loc] or None. m: total rows (default m_r * P, right
    only when the shards are equal: pass m when they are uneven). Returns Y, or (Y, gathered X
    [m, k]) with return_gathered (the gathered X is not differentiable). Differentiable in
    x_shard, weight and bias. partial_dtype ("fp32", "output") is the backward's (its dX is a
    GEMM+RS); gemm_reduction ("any", "fp32") every commgemm GEMM's; None: the comm's
    (docs/PYTHON.md, Precision)."""
    _check_2d("x_shard", x_shard)
    comm_id = _comm_arg(comm)
    x_shard, weight, bias = _autocast(x_shard, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    if m is None:
        m = x_shard.shape[0] * comm.size
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x_shard, weight, bias)):
        y, gathered = _AllGatherMatmul.apply(x_shard, weight, bias, comm_id, m, _backend_arg(backend), pd, gr,
                                             weight.requires_grad, return_gathered)
    else:
        y, gathered = _ops.all_gather_matmul(x_shard, weight, bias, comm_id, m, "TN", _backend_arg(backend),
                                             return_gathered, gr)
    return (y, gathered) if return_gathered else y


def matmul_reduce_scatter(x, weight, bias=None, *, comm, backend=None, partial_dtype=None, gemm_reduction=None):
    """Y_r[m_r, n] = this rank's rows of sum_ranks x . weight^T (+ bias, added once), on the current
    CUDA stream. x: [m, k_loc]; weight: [n, k_loc]; bias: [n] or None. Differentiable.
    partial_dtype: "fp32" or "output" (the same on every rank), gemm_reduction: "any" or "fp32";
    None: the comm's."""
    _check_2d("x", x)
    comm_id = _comm_arg(comm)
    x, weight, bias = _autocast(x, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _MatmulReduceScatter.apply(x, weight, bias, comm_id, _backend_arg(backend), pd, gr)
    return _ops.matmul_reduce_scatter(x, weight, bias, comm_id, "TN", _backend_arg(backend), pd, gr)


def matmul_all_reduce(x, weight, bias=None, *, comm, backend=None, partial_dtype=None, gemm_reduction=None):
    """Y[m, n] = sum_ranks x . weight^T (+ bias, added once), on every rank. Differentiable.
    partial_dtype, gemm_reduction: as matmul_reduce_scatter's."""
    _check_2d("x", x)
    comm_id = _comm_arg(comm)
    x, weight, bias = _autocast(x, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _MatmulAllReduce.apply(x, weight, bias, comm_id, _backend_arg(backend), pd, gr)
    return _ops.matmul_all_reduce(x, weight, bias, comm_id, "TN", _backend_arg(backend), pd, gr)


def bulk_matmul_collective(a=None, b=None, send=None, *, comm, layout="TN", collective="all_gather", m=None,
                           backend=None, gemm_reduction=None):
    """c = op(a) . op(b) (local GEMM, layout as in commgemm.h) overlapped with an unrelated
    collective on `send` (all_gather: [m_r, cols] -> [m, cols]; reduce_scatter: [m, cols] ->
    [m_r, cols], fp32 sums). Returns (c, recv); a half left out gives an empty tensor.
    gemm_reduction: the GEMM's ("any", "fp32"; None: the comm's). Not differentiable."""
    comm_id = _comm_arg(comm)
    if (a is None) != (b is None):
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"bulk_matmul_collective: a is {'None' if a is None else 'given'} and b is "
                                        f"{'None' if b is None else 'given'}: expected both (the GEMM) or neither")
    if a is None and send is None:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        "bulk_matmul_collective: no GEMM (a, b) and no collective (send): expected "
                                        "at least one of them")
    if send is not None and m is None:
        m = send.shape[0] * comm.size if _lib.parse_collective(collective) == _lib.Collective.ALL_GATHER else 0
    return _ops.bulk_matmul_collective(a, b, send, comm_id, layout, collective, int(m or 0),
                                       _backend_arg(backend), _gemm_reduction_arg(gemm_reduction))


# --------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------


def _flatten(x):
    return x.reshape(-1, x.shape[-1])


def _check_lead(what, lead, m, comm, sharded):
    """x of shape [s, b..., features] flattens to m rows; the output goes back to
    [rows / prod(b...), b..., out]. With sharded (GEMM+RS), each rank's rows are
    shard_rows(m, q, P) of the flattened rows, which splits whole sequence
    positions only if every shard is a multiple of prod(b...): checked for every
    rank q alike, so all ranks raise together, before any collective."""
    inner = math.prod(lead[1:]) if len(lead) > 1 else 1
    if inner <= 1:
        return
    P = comm.size
    bad = [q for q in range(P) if (shard_rows(m, q, P) if sharded else m) % inner]
    if bad:
        q = bad[0]
        got = shard_rows(m, q, P) if sharded else m
        raise _lib.InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"{what}: input of leading shape {tuple(lead)} is {m} rows of {inner} per sequence position; rank {q} "
            f"of {P} would get {got} rows, not a multiple of {inner}: expected a first dimension that splits "
            f"evenly (rows per rank = shard_rows(m, rank, P)); pad the sequence to a multiple of {P} or pass "
            "2-D [rows, features] inputs")


class _ShardedLinear(torch.nn.Module):
    """What ColumnParallelLinear and RowParallelLinear share: the layer's
    sizes, a weight shard of weight_shape, a bias of bias_size (or none),
    nn.Linear's initialization with the full layer's fan-in, and building
    from a full nn.Linear through _copy_shard."""

    def __init__(self, in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                 weight_shape, bias_size, skip_bias_add, partial_dtype, gemm_reduction):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.comm = comm
        self.sequence_parallel = sequence_parallel
        self.skip_bias_add = bool(skip_bias_add)
        self.backend = backend
        # "fp32"/"output" and "any"/"fp32", or None: the comm's (checked here, not at the first call)
        self.partial_dtype = _partial_dtype_arg(partial_dtype) or None
        self.gemm_reduction = _gemm_reduction_arg(gemm_reduction) or None
        kw = {"dtype": dtype, "device": device}
        self.weight = torch.nn.Parameter(torch.empty(*weight_shape, **kw))
        self.bias = torch.nn.Parameter(torch.empty(bias_size, **kw)) if bias else None
        # the subclass calls reset_parameters once it knows its shard

    def reset_parameters(self):
        """nn.Linear's distribution (uniform, fan-in of the full layer), drawn for the
        full weight and sliced, as Megatron initializes: every rank must draw the
        same numbers, so seed the ranks alike (torch.manual_seed(s) on each). Drawing
        only the shard would give every rank the same shard, hidden units that stay
        copies of each other. Costs one full weight of memory for the moment."""
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        with torch.no_grad():
            full = torch.empty(self.out_features, self.in_features, dtype=self.weight.dtype,
                               device=self.weight.device)
            torch.nn.init.uniform_(full, -bound, bound)
            self.weight.copy_(self._weight_shard(full))
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)  # the same on every rank (RowParallelLinear's is replicated)

    @classmethod
    def from_linear(cls, linear, comm, sequence_parallel=True, backend=None, skip_bias_add=False,
                    partial_dtype=None, gemm_reduction=None):
        """This rank's shard of a full nn.Linear (same values on every rank)."""
        layer = cls(linear.in_features, linear.out_features, comm, bias=linear.bias is not None,
                    sequence_parallel=sequence_parallel, dtype=linear.weight.dtype,
                    device=linear.weight.device, backend=backend, skip_bias_add=skip_bias_add,
                    partial_dtype=partial_dtype, gemm_reduction=gemm_reduction)
        with torch.no_grad():
            layer._copy_shard(linear)
        return layer

    def _copy_shard(self, linear):
        self.weight.copy_(self._weight_shard(linear.weight))
        if self.bias is not None:
            self.bias.copy_(self._bias_shard(linear.bias))

    def _weight_shard(self, full):
        raise NotImplementedError

    def _bias_shard(self, full):
        raise NotImplementedError

    def _precision_args(self):
        """(partial_dtype, gemm_reduction) for the custom ops: "" is the comm's."""
        return self.partial_dtype or "", self.gemm_reduction or ""

    def _precision_repr(self):
        """What the layer's commgemm ops compute with: its own settings, else the comm's."""
        def show(mine, comms):
            if mine is not None:
                return mine
            return "the comm's (closed)" if self.comm.closed else f"{comms()} (the comm's)"
        return (f"partial_dtype={show(self.partial_dtype, lambda: self.comm.partial_dtype)}, "
                f"gemm_reduction={show(self.gemm_reduction, lambda: self.comm.gemm_reduction)}")


class ColumnParallelLinear(_ShardedLinear):
    """Y = X . W^T + b with W's rows (the output features) split over the ranks.

    Rank r holds out_local = shard_rows(out_features, r, P) output features:
    weight [out_local, in_features], bias [out_local]. With sequence_parallel
    (default) the input is this rank's rows of X and the forward is AG+GEMM;
    the output is [m, out_local] (all rows, local features). Without, the
    input is the full X on every rank and only the backward communicates
    (dX = allreduce(dY . W)).

    forward(x, m=None): x is [rows, in_features] or [..., in_features]
    (leading dims flattened into rows); m is the total row count across
    ranks (default rows * P: pass it when the shards are uneven).
    skip_bias_add=True: forward returns (y, bias) without adding the bias,
    for the caller to add (Megatron's option; docs/PYTHON.md).
    partial_dtype ("fp32" or "output"): the partials of the backward's dX
    reduction (GEMM+RS, or GEMM+AR without sequence parallelism), the same
    on every rank; gemm_reduction ("any" or "fp32"): the commgemm GEMMs';
    None: the comm's (docs/PYTHON.md, Precision). extra_repr names both.
    """

    def __init__(self, in_features, out_features, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, skip_bias_add=False, partial_dtype=None, gemm_reduction=None):
        out_local = comm.shard_rows(out_features)
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                         (out_local, in_features), out_local, skip_bias_add, partial_dtype, gemm_reduction)
        self.out_local = out_local
        self.out_offset = comm.shard_offset(out_features)
        self.reset_parameters()

    def _weight_shard(self, full):
        return full[self.out_offset:self.out_offset + self.out_local]

    def _bias_shard(self, full):
        return full[self.out_offset:self.out_offset + self.out_local]

    def forward(self, x, m=None):
        lead = x.shape[:-1]
        x2, weight, bias = _autocast(_flatten(x), self.weight, self.bias)
        if self.skip_bias_add:
            bias = None
        backend = _backend_arg(self.backend)
        pd, gr = self._precision_args()
        if self.sequence_parallel:
            if m is None:
                m = x2.shape[0] * self.comm.size
            _check_lead("ColumnParallelLinear", lead, int(m), self.comm, False)
            if torch.is_grad_enabled():
                y, _ = _AllGatherMatmul.apply(x2, weight, bias, self.comm.id, m, backend, pd, gr,
                                              weight.requires_grad, False)
            else:
                y, _ = _ops.all_gather_matmul(x2, weight, bias, self.comm.id, m, "TN", backend, False, gr)
            if len(lead) > 1:
                y = y.view(-1, *lead[1:], self.out_local)
        else:
            if torch.is_grad_enabled():
                y = _LinearAllReduceGrad.apply(x2, weight, bias, self.comm.id, backend, pd, gr)
            else:
                y = torch.nn.functional.linear(x2, weight, bias)
            y = y.view(*lead, self.out_local)
        # skip_bias_add: every row of this rank's features is here, so the
        # caller's add gives the bias its whole gradient.
        return (y, self.bias) if self.skip_bias_add else y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} (local {self.out_local}), "
                f"bias={self.bias is not None}, sequence_parallel={self.sequence_parallel}, "
                f"skip_bias_add={self.skip_bias_add}, {self._precision_repr()}, "
                f"rank={self.comm.rank}/{self.comm.size}")


class RowParallelLinear(_ShardedLinear):
    """Y = X . W^T + b with W's columns (the input features) split over the ranks.

    Rank r holds in_local = shard_rows(in_features, r, P) input features:
    weight [out_features, in_local]; bias [out_features] is replicated and
    added once (on the owner of each row). The input is [m, in_local] (e.g.
    a ColumnParallelLinear's output). With sequence_parallel (default) the
    forward is GEMM+RS and the output is this rank's rows [m_r, out_features];
    without, GEMM+AR and the output is all rows on every rank.
    skip_bias_add=True: forward returns (y, bias) without adding the bias;
    with sequence parallelism its gradient is summed over the ranks in the
    backward, so it is the full sum on every rank as when the layer adds it.
    partial_dtype ("fp32" or "output"): the partials the forward's GEMM+RS
    (GEMM+AR without sequence parallelism) sends, the same on every rank;
    gemm_reduction ("any" or "fp32"): the commgemm GEMMs'; None: the comm's
    (docs/PYTHON.md, Precision). extra_repr names both.
    """

    def __init__(self, in_features, out_features, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, skip_bias_add=False, partial_dtype=None, gemm_reduction=None):
        in_local = comm.shard_rows(in_features)
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                         (out_features, in_local), out_features, skip_bias_add, partial_dtype, gemm_reduction)
        self.in_local = in_local
        self.in_offset = comm.shard_offset(in_features)
        self.reset_parameters()

    def _weight_shard(self, full):
        return full[:, self.in_offset:self.in_offset + self.in_local]

    def _bias_shard(self, full):
        return full

    def forward(self, x):
        lead = x.shape[:-1]
        x2, weight, bias = _autocast(_flatten(x), self.weight, self.bias)
        if self.skip_bias_add:
            bias = None
        backend = _backend_arg(self.backend)
        pd, gr = self._precision_args()
        if self.sequence_parallel:
            _check_lead("RowParallelLinear", lead, x2.shape[0], self.comm, True)
            if torch.is_grad_enabled():
                y = _MatmulReduceScatter.apply(x2, weight, bias, self.comm.id, backend, pd, gr)
            else:
                y = _ops.matmul_reduce_scatter(x2, weight, bias, self.comm.id, "TN", backend, pd, gr)
            if len(lead) > 1:
                y = y.view(-1, *lead[1:], self.out_features)
        else:
            if torch.is_grad_enabled():
                y = _MatmulAllReduce.apply(x2, weight, bias, self.comm.id, backend, pd, gr)
            else:
                y = _ops.matmul_all_reduce(x2, weight, bias, self.comm.id, "TN", backend, pd, gr)
            y = y.view(*lead, self.out_features)
        if not self.skip_bias_add:
            return y
        # The caller adds the bias to this rank's rows only (sequence
        # parallel): its gradient is summed over the ranks on the way back.
        if self.bias is not None and self.sequence_parallel and torch.is_grad_enabled():
            return y, _BiasSummedOverRanks.apply(self.bias, self.comm.id, backend, pd)
        return y, self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features} (local {self.in_local}), out_features={self.out_features}, "
                f"bias={self.bias is not None}, sequence_parallel={self.sequence_parallel}, "
                f"skip_bias_add={self.skip_bias_add}, {self._precision_repr()}, "
                f"rank={self.comm.rank}/{self.comm.size}")
