"""commgemm.torch's tensor-parallel layers: ColumnParallelLinear,
FusedColumnParallelLinear (several outputs from one all-gather) and
RowParallelLinear, with their feature partitions, input layouts and the
checks that run before their collective ops. Imported by commgemm.torch."""

import math
import operator
import types

import torch

from . import _lib
from . import _torch_fp8 as _fp8
from ._lib import Status, shard_rows
from ._torch_autograd import _AllGatherMatmul, _BiasSummedOverRanks, _LinearAllReduceGrad, _MatmulAllReduce, \
    _MatmulReduceScatter, _ParallelMLP
from ._torch_collectives import GatherColumns, route
from ._torch_ops import _ops


def _autocast(x, weight, bias):
    """Under torch.autocast, the floating inputs cast to its dtype (as F.linear's
    GEMM is), recorded by autograd: the op and its backward then see one dtype,
    and the gradients reach fp32 parameters as fp32. Unchanged otherwise."""
    dev = x.device.type
    if not torch.is_autocast_enabled(dev):
        return x, weight, bias
    dt = torch.get_autocast_dtype(dev)
    return tuple(t.to(dt) if t is not None and t.is_floating_point() else t for t in (x, weight, bias))


def _partial_dtype_arg(value):
    """A custom op's partial_dtype: "" (the comm's), "fp32" or "output"."""
    pd = _lib.parse_partial_dtype(value)
    return "" if pd == _lib.PartialDtype.DEFAULT else _lib.partial_dtype_name(pd)


def _gemm_reduction_arg(value):
    """A custom op's gemm_reduction: "" (the comm's), "any" or "fp32"."""
    gr = _lib.parse_gemm_reduction(value)
    return "" if gr == _lib.GemmReduction.DEFAULT else _lib.gemm_reduction_name(gr)


def _backend_arg(backend):
    if backend is None:
        return ""
    if isinstance(backend, str):
        return backend
    return _lib.backend_name(backend)


def _invalid(message):
    return _lib.InvalidArgumentError(Status.INVALID_ARGUMENT, message)


# --------------------------------------------------------------------------
# Rows, positions, partitions
# --------------------------------------------------------------------------


def check_positions(what, lead, m, comm):
    """x of sequence-first leading shape [s, b...] flattens to rows of
    prod(b...) per position; with sequence parallelism rank q holds
    shard_rows(m, q, P) of the m rows, whole positions only if every shard is
    a multiple of prod(b...): checked for every rank q alike, so all ranks
    raise together, before any collective."""
    inner = math.prod(lead[1:]) if len(lead) > 1 else 1
    if inner <= 1:
        return
    P = comm.size
    bad = [q for q in range(P) if shard_rows(m, q, P) % inner]
    if bad:
        q = bad[0]
        raise _invalid(
            f"{what}: input of leading shape {tuple(lead)} is {m} rows of {inner} per sequence position; rank {q} "
            f"of {P} would get {shard_rows(m, q, P)} rows, not a multiple of {inner}: expected a sequence that "
            f"splits evenly (rows per rank = shard_rows(m, rank, P)); pad the sequence to a multiple of {P} or "
            "pass 2-D [rows, features] inputs")


def partition(total, comm, multiple, sizes, what, name):
    """The P per-rank sizes of `total` features: partition_sizes as given,
    else whole units of partition_multiple features split with the ceil
    split, else the ceil split of the features. Raised alike on every rank."""
    P = comm.size
    if multiple is not None and sizes is not None:
        raise _invalid(f"{what}: partition_multiple = {multiple} and partition_sizes = {list(sizes)}: expected "
                       "at most one of them")
    if sizes is not None:
        try:
            sizes = tuple(operator.index(v) for v in sizes)
        except TypeError:
            raise _invalid(f"{what}: partition_sizes = {sizes!r}: expected {P} integers, one per rank") from None
        if len(sizes) != P or min(sizes, default=0) < 0 or sum(sizes) != total:
            raise _invalid(f"{what}: partition_sizes = {list(sizes)} (sum {sum(sizes)}): expected {P} sizes, one "
                           f"per rank, each >= 0, summing to {name} = {total}")
        return sizes
    if multiple is not None:
        mult = operator.index(multiple)
        if mult <= 0 or total % mult:
            raise _invalid(f"{what}: partition_multiple = {multiple} does not divide {name} = {total}: expected "
                           f"a positive divisor, e.g. the head dimension with {name} = heads x head_dim")
        return tuple(shard_rows(total // mult, q, P) * mult for q in range(P))
    return tuple(shard_rows(total, q, P) for q in range(P))


def _collective_call(run, problem=None, m_hint=None):
    """Runs a forward's first collective op. problem: what the layer's checks
    found wrong with this rank's arguments. The op still runs, so that the
    peers learn at once that this rank refused its call (a MismatchError
    naming it; the comm stays usable) instead of waiting out the timeout;
    this rank then raises `problem`. m_hint: added to a MismatchError about
    m (an m that the ranks guessed from their own rows)."""
    try:
        out = run()
    except _lib.CommGemmError as e:
        if problem:
            raise _invalid(problem) from e
        if m_hint and isinstance(e, _lib.MismatchError) and " m = " in e.message:
            raise _lib.MismatchError(e.status, f"{e.message}. {m_hint}") from e
        raise
    if problem:
        raise _invalid(problem)
    return out


# --------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------


class _ShardedLinear(torch.nn.Module):
    """What the layers share: the full layer's sizes, a weight shard, a bias
    (or none), the comm and its Route, nn.Linear's initialization with the
    full layer's fan-in, the input layout, and building from a full
    nn.Linear through _weight_shard/_bias_shard."""

    def __init__(self, in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                 weight_shape, bias_size, skip_bias_add, partial_dtype, gemm_reduction, batch_first):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.comm = comm
        self.sequence_parallel = sequence_parallel
        self.skip_bias_add = bool(skip_bias_add)
        self.batch_first = bool(batch_first)
        self.backend = backend
        # "fp32"/"output" and "any"/"fp32", or None: the comm's (checked here, not at the first call)
        self.partial_dtype = _partial_dtype_arg(partial_dtype) or None
        self.gemm_reduction = _gemm_reduction_arg(gemm_reduction) or None
        kw = {"dtype": dtype, "device": device}
        self.weight = torch.nn.Parameter(torch.empty(*weight_shape, **kw))
        self.bias = torch.nn.Parameter(torch.empty(bias_size, **kw)) if bias else None
        # the subclass calls reset_parameters once it knows its shard

    @property
    def fp8_recipe(self):
        """None, or the FP8 recipe the layer's GEMMs run with (forward and
        backward; docs/PYTHON.md, FP8): Float8CurrentScaling, DelayedScaling
        or Float8BlockScaling of commgemm.torch. Settable."""
        return self.__dict__.get("_fp8_recipe")

    @fp8_recipe.setter
    def fp8_recipe(self, value):
        self.__dict__["_fp8_recipe"] = _fp8.check_recipe(value, type(self).__name__)

    @property
    def backend(self):
        return self._backend

    @backend.setter
    def backend(self, value):
        """The per-call backend of the layer's ops (None: the comm's); also
        decides what the layer asks of them (Comm.supports)."""
        self._backend = value
        self._rt = route(self.comm, _backend_arg(value))

    def _full_shape(self):
        return (sum(self.out_features) if isinstance(self.out_features, tuple) else self.out_features,
                self.in_features)

    def reset_parameters(self):
        """nn.Linear's distribution (uniform, fan-in of the full layer), drawn for the
        full weight and sliced, as Megatron initializes: every rank must draw the
        same numbers, so seed the ranks alike (torch.manual_seed(s) on each). Drawing
        only the shard would give every rank the same shard, hidden units that stay
        copies of each other. Costs one full weight of memory for the moment."""
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        with torch.no_grad():
            full = torch.empty(*self._full_shape(), dtype=self.weight.dtype, device=self.weight.device)
            torch.nn.init.uniform_(full, -bound, bound)
            self.weight.copy_(self._weight_shard(full))
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)  # the same on every rank (RowParallelLinear's is replicated)

    @classmethod
    def from_linear(cls, linear, comm, **options):
        """This rank's shard of a full nn.Linear (the same values on every
        rank); options: the constructor's (sequence_parallel, backend, ...)."""
        options.setdefault("out_features", linear.out_features)
        layer = cls(linear.in_features, comm=comm, bias=linear.bias is not None, dtype=linear.weight.dtype,
                    device=linear.weight.device, **options)
        with torch.no_grad():
            layer.weight.copy_(layer._weight_shard(linear.weight))
            if layer.bias is not None:
                layer.bias.copy_(layer._bias_shard(linear.bias))
        return layer

    def _weight_shard(self, full):
        raise NotImplementedError

    def _bias_shard(self, full):
        raise NotImplementedError

    def _rows(self, x):
        """x as 2-D rows, in sequence-major order where the order matters (the
        sequence-parallel ops split the rows), and the sequence-first leading
        shape to give back: batch_first inputs [b, s, f] are read as [s, b, f]."""
        if x.dim() < 1:
            raise _invalid(f"{type(self).__name__}: input is a scalar: expected [..., features]")
        if self.batch_first and self.sequence_parallel:
            if x.dim() != 3:
                raise _invalid(f"{type(self).__name__}(batch_first=True): input has shape {tuple(x.shape)}: "
                               "expected [batch, sequence, features]")
            x = x.transpose(0, 1)
        return x.reshape(-1, x.shape[-1]), x.shape[:-1]

    def _unrows(self, y, lead):
        """2-D output rows back to the input's leading shape (sequence-first
        rows per position; batch_first: [b, s, ...])."""
        if not lead:  # a 1-D input: one row
            return y if self.sequence_parallel else y.reshape(y.shape[-1])
        if len(lead) > 1:
            y = y.reshape(-1, *lead[1:], y.shape[-1])
        return y.transpose(0, 1) if self.batch_first and self.sequence_parallel else y

    def _precision_args(self):
        """(partial_dtype, gemm_reduction) for the custom ops: "" is the comm's."""
        return self.partial_dtype or "", self.gemm_reduction or ""

    def _common_repr(self):
        """What the layer's commgemm ops compute with (its own settings, else
        the comm's), its options and rank."""
        def show(mine, comms):
            if mine is not None:
                return mine
            return "the comm's (closed)" if self.comm.closed else f"{comms()} (the comm's)"
        extra = "".join(f", {name}=True" for name in ("batch_first",) if getattr(self, name))
        extra += f", fp8_recipe={self.fp8_recipe}" if self.fp8_recipe is not None else ""
        return (f"bias={self.bias is not None}, sequence_parallel={self.sequence_parallel}, "
                f"skip_bias_add={self.skip_bias_add}{extra}, "
                f"partial_dtype={show(self.partial_dtype, lambda: self.comm.partial_dtype)}, "
                f"gemm_reduction={show(self.gemm_reduction, lambda: self.comm.gemm_reduction)}, "
                f"rank={self.comm.rank}/{self.comm.size}")


def _features_repr(total, sizes, rank):
    even = tuple(shard_rows(total, q, len(sizes)) for q in range(len(sizes)))
    split = "" if sizes == even else f" of {list(sizes)}"
    return f"{total} (local {sizes[rank]}{split})"


class _ColumnLinear(_ShardedLinear):
    """Column-parallel outputs: each output's features split over the ranks
    by its own partition; this rank's shards of every output stacked into one
    weight [sum of the local features, in], so one AG+GEMM computes them all."""

    def __init__(self, in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                 skip_bias_add, partial_dtype, gemm_reduction, partition_multiple, partition_sizes, gather_output,
                 batch_first, fused):
        what = type(self).__name__
        outs = tuple(out_features) if fused else (out_features,)
        multiples = partition_multiple if fused and isinstance(partition_multiple, (list, tuple)) \
            else (partition_multiple,) * len(outs)
        sizes = partition_sizes if fused and partition_sizes is not None else (partition_sizes,) * len(outs)
        if len(multiples) != len(outs) or len(sizes) != len(outs):
            raise _invalid(f"{what}: {len(outs)} outputs, but partition_multiple has {len(multiples)} entries "
                           f"and partition_sizes {len(sizes)}: expected one per output (or one int for all)")
        self.partitions = tuple(partition(n, comm, mult, s, what, "out_features" if not fused else f"output {i}")
                                for i, (n, mult, s) in enumerate(zip(outs, multiples, sizes)))
        if gather_output and skip_bias_add:
            raise _invalid(f"{what}: gather_output=True with skip_bias_add=True: the bias shard handed back would "
                           "not match the gathered output; let the layer add the bias (skip_bias_add=False)")
        r = comm.rank
        locals_ = tuple(p[r] for p in self.partitions)
        super().__init__(in_features, outs if fused else out_features, comm, bias, sequence_parallel, dtype,
                         device, backend, (sum(locals_), in_features), sum(locals_), skip_bias_add, partial_dtype,
                         gemm_reduction, batch_first)
        self.gather_output = bool(gather_output)
        self.activation = None
        self._locals = locals_
        self._offsets = tuple(sum(p[:r]) for p in self.partitions)
        self.reset_parameters()

    def _weight_shard(self, full):
        """This rank's rows of a full [sum(out_features), ...] weight or bias."""
        outs = self.out_features if isinstance(self.out_features, tuple) else (self.out_features,)
        if full.shape[0] != sum(outs):
            raise _invalid(f"{type(self).__name__}: the full weight has {full.shape[0]} output features, "
                           f"expected {sum(outs)} ({' + '.join(map(str, outs))})")
        pieces, base = [], 0
        for n, off, local in zip(outs, self._offsets, self._locals):
            pieces.append(full[base + off:base + off + local])
            base += n
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    _bias_shard = _weight_shard

    def _input_rows(self, x):
        """x as rows (_rows), its leading shape, and what is wrong with its features (or None)."""
        x2, lead = self._rows(x)
        problem = None
        if x2.shape[-1] != self.in_features:
            problem = (f"{type(self).__name__}: input has shape {tuple(x.shape)}: its last dimension is "
                       f"{x2.shape[-1]}, expected in_features = {self.in_features}")
        return x2, lead, problem

    def _sequence_m(self, x2, lead, m, problem):
        """The total rows m of a sequence-parallel input (default: rows x P), checked
        against this rank's rows: (m, problem, hint for a MismatchError about m)."""
        what, comm = type(self).__name__, self.comm
        P, r, rows = comm.size, comm.rank, x2.shape[0]
        hint = None
        if m is None:
            m = rows * P
            hint = (f"{what}: m was not passed, so each rank took m = its rows x P (rank {r}: {rows} x {P} = "
                    f"{m}), which differ where the row shards are uneven: pass m = the total rows over all "
                    "ranks (sequence x batch), the same on every rank")
        m = operator.index(m)
        if m < 0:
            raise _invalid(f"{what}: m = {m}: expected the total rows over all ranks (>= 0)")
        check_positions(what, lead, m, comm)
        if problem is None and shard_rows(m, r, P) != rows:
            problem = (f"{what}: m = {m} gives rank {r} of {P} shard_rows(m, rank, P) = {shard_rows(m, r, P)} "
                       f"rows, but its input has {rows}: pass m = the total rows over all ranks, each rank "
                       "holding its ceil-split shard of them (commgemm.torch.scatter_rows splits so)")
        return m, problem, hint

    def _column_forward(self, x, m):
        """The outputs [..., local or full features] (a list), before the bias
        of skip_bias_add."""
        x2, lead, problem = self._input_rows(x)
        x2, weight, bias = _autocast(x2, self.weight, self.bias)
        if self.skip_bias_add:
            bias = None
        rt, comm, (pd, gr) = self._rt, self.comm, self._precision_args()
        if self.sequence_parallel:
            m, problem, hint = self._sequence_m(x2, lead, m, problem)
            # the GELU in AG+GEMM's epilogue (the fp8 GEMMs take none: torch's GELU after them)
            fused = (self.activation == "gelu" and rt.epilogue and self.fp8_recipe is None
                     and all(comm.epilogue_fits(w, rt.backend) for w in self.partition))
            if self.fp8_recipe is not None:
                run = _fp8.layer_run(self, x2, weight, bias, m, "ag")
            elif torch.is_grad_enabled():
                def run():
                    return _AllGatherMatmul.apply(x2, weight, bias, comm.id, m, rt, pd, gr, weight.requires_grad,
                                                  False, fused)[0]
            elif fused:
                def run():
                    return _ops.matmul_epilogue("ag", x2, weight, bias, None, comm.id, m, "TN", rt.backend, "gelu",
                                                "", gr, False)[0]
            else:
                def run():
                    return _ops.all_gather_matmul(x2, weight, bias, comm.id, m, "TN", rt.backend, False, gr)[0]
            y = _collective_call(run, problem, hint)
        else:
            if problem:
                raise _invalid(problem)
            fused = False
            if self.fp8_recipe is not None:
                y = _fp8.layer_run(self, x2, weight, bias, None, "local_ar")()
            elif torch.is_grad_enabled():
                y = _LinearAllReduceGrad.apply(x2, weight, bias, comm.id, rt.backend, pd, gr)
            else:
                y = torch.nn.functional.linear(x2, weight, bias)
        if self.activation == "gelu" and not fused:  # where the backend has no epilogues, or no collective
            y = torch.nn.functional.gelu(y, approximate="tanh")
        ys = list(torch.split(y, self._locals, dim=-1)) if len(self._locals) > 1 else [y]
        if self.gather_output:
            ys = [GatherColumns.apply(t, comm.id, p, rt) for t, p in zip(ys, self.partitions)]
        return [self._unrows(t, lead) for t in ys]


class ColumnParallelLinear(_ColumnLinear):
    """Y = X . W^T + b with W's rows (the output features) split over the ranks.

    Rank r holds out_local features: weight [out_local, in_features], bias
    [out_local]. The split: the ceil split shard_rows(out_features, r, P);
    partition_multiple=d splits whole groups of d features (heads of
    head_dim d: 8 heads of 32 on 3 ranks are 96/96/64 features, never a cut
    head); partition_sizes=[n_0, ..., n_{P-1}] gives every rank's count (the
    same list on every rank). With sequence_parallel (default) the input is
    this rank's rows of X and the forward is AG+GEMM; the output is
    [m, out_local] (all rows, local features). Without, the input is the
    full X on every rank and only the backward communicates
    (dX = allreduce(dY . W)).

    forward(x, m=None): x is [rows, in_features] or [..., in_features]
    (leading dims flattened into rows; [s, b, h] is split along s);
    batch_first=True reads [b, s, h] inputs, split along s, and gives
    [b, s, out] outputs. m is the total row count across ranks (default
    rows * P: pass it when the shards are uneven).
    gather_output=True: the output is [..., out_features], every rank's
    features gathered (autograd-aware; the same on every rank).
    skip_bias_add=True: forward returns (y, bias) without adding the bias,
    for the caller to add (Megatron's option; docs/PYTHON.md).
    activation="gelu": the output is gelu(X . W^T + b), gelu's tanh form
    (F.gelu(approximate="tanh")). With sequence parallelism on a backend
    with epilogues (Comm.supports("epilogue")), AG+GEMM applies it in its
    GELU_AUX epilogue and keeps the pre-activation for the backward, which
    multiplies dY by gelu' before the dgrad; elsewhere torch applies it
    after the op.
    partial_dtype ("fp32" or "output"): the partials of the backward's dX
    reduction (GEMM+RS, or GEMM+AR without sequence parallelism), the same
    on every rank; gemm_reduction ("any" or "fp32"): the commgemm GEMMs';
    None: the comm's (docs/PYTHON.md, Precision). extra_repr names both.
    fp8_recipe: None, or Float8CurrentScaling(), DelayedScaling() or
    Float8BlockScaling() (commgemm.torch): the GEMMs of the forward and the
    backward run in FP8 (docs/PYTHON.md, FP8); settable (layer.fp8_recipe).
    """

    def __init__(self, in_features, out_features, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, skip_bias_add=False, partial_dtype=None, gemm_reduction=None,
                 partition_multiple=None, partition_sizes=None, gather_output=False, batch_first=False,
                 activation=None, fp8_recipe=None):
        if activation not in (None, "gelu"):
            raise _invalid(f"{type(self).__name__}: activation={activation!r}: expected None or 'gelu' (the tanh "
                           "form, F.gelu(approximate='tanh'))")
        if activation and skip_bias_add:
            raise _invalid(f"{type(self).__name__}: activation={activation!r} with skip_bias_add=True: the bias "
                           "goes in before the activation; let the layer add it (skip_bias_add=False)")
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                         skip_bias_add, partial_dtype, gemm_reduction, partition_multiple, partition_sizes,
                         gather_output, batch_first, fused=False)
        self.activation = activation
        self.fp8_recipe = fp8_recipe
        self.partition = self.partitions[0]
        self.out_local = self._locals[0]
        self.out_offset = self._offsets[0]

    def forward(self, x, m=None):
        y = self._column_forward(x, m)[0]
        # skip_bias_add: every row of this rank's features is here, so the
        # caller's add gives the bias its whole gradient.
        return (y, self.bias) if self.skip_bias_add else y

    def extra_repr(self):
        gather = ", gather_output=True" if self.gather_output else ""
        act = f", activation={self.activation!r}" if self.activation else ""
        return (f"in_features={self.in_features}, out_features="
                f"{_features_repr(self.out_features, self.partition, self.comm.rank)}{gather}{act}, "
                f"{self._common_repr()}")


class FusedColumnParallelLinear(_ColumnLinear):
    """Several column-parallel outputs of one input from one AG+GEMM: gate
    and up projections, or q, k and v. out_features: one size per output;
    each is split over the ranks by its own partition (partition_multiple:
    one int for all outputs or one per output, e.g. (head_dim, head_dim,
    head_dim) for q/k/v with fewer k/v heads; partition_sizes: one list of
    P sizes per output, or None entries for the ceil split). The weight is
    this rank's shards of every output stacked: [sum(out_locals), in], so
    the input is gathered once.

    forward(x, m=None) returns a tuple, one [..., out_locals[i]] tensor per
    output ([..., out_features[i]] with gather_output). Other options as
    ColumnParallelLinear's (no skip_bias_add). from_linear(linear, comm,
    out_features=...) takes the shards of a fused nn.Linear whose rows are
    the outputs one after another; from_linears([q, k, v], comm) of one
    nn.Linear per output.
    """

    def __init__(self, in_features, out_features, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, partial_dtype=None, gemm_reduction=None, partition_multiple=None,
                 partition_sizes=None, gather_output=False, batch_first=False, fp8_recipe=None):
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                         False, partial_dtype, gemm_reduction, partition_multiple, partition_sizes, gather_output,
                         batch_first, fused=True)
        self.fp8_recipe = fp8_recipe
        self.out_locals = self._locals
        self.out_offsets = self._offsets

    @classmethod
    def from_linear(cls, linear, comm, out_features=None, **options):
        """This rank's shards of a fused nn.Linear whose rows are the outputs
        one after another (e.g. a gate_up_proj of [2 * ffn, hidden]):
        out_features gives their sizes."""
        if out_features is None or sum(out_features) != linear.out_features:
            raise _invalid(f"{cls.__name__}.from_linear: out_features = {out_features} for an nn.Linear of "
                           f"{linear.out_features} output features: expected the outputs' sizes, summing to it")
        return super().from_linear(linear, comm, out_features=out_features, **options)

    @classmethod
    def from_linears(cls, linears, comm, **options):
        """This rank's shards of one nn.Linear per output (same in_features and
        bias presence; the same values on every rank)."""
        linears = list(linears)
        if len({(lin.in_features, lin.bias is not None) for lin in linears}) != 1:
            raise _invalid(f"{cls.__name__}.from_linears: in_features and bias presence "
                           f"{[(lin.in_features, lin.bias is not None) for lin in linears]}: expected them alike")
        with torch.no_grad():
            fused = types.SimpleNamespace(
                in_features=linears[0].in_features, out_features=sum(lin.out_features for lin in linears),
                weight=torch.cat([lin.weight for lin in linears]),
                bias=torch.cat([lin.bias for lin in linears]) if linears[0].bias is not None else None)
        return cls.from_linear(fused, comm, out_features=[lin.out_features for lin in linears], **options)

    def forward(self, x, m=None):
        return tuple(self._column_forward(x, m))

    def extra_repr(self):
        outs = ", ".join(_features_repr(n, p, self.comm.rank) for n, p in zip(self.out_features, self.partitions))
        gather = ", gather_output=True" if self.gather_output else ""
        return f"in_features={self.in_features}, out_features=[{outs}]{gather}, {self._common_repr()}"


class RowParallelLinear(_ShardedLinear):
    """Y = X . W^T + b with W's columns (the input features) split over the ranks.

    Rank r holds in_local input features (shard_rows(in_features, r, P), or
    as partition_multiple / partition_sizes say, as ColumnParallelLinear's:
    give the row layer the partition of the column layer that feeds it):
    weight [out_features, in_local]; bias [out_features] is replicated and
    added once (on the owner of each row). The input is [m, in_local] (e.g.
    a ColumnParallelLinear's output). With sequence_parallel (default) the
    forward is GEMM+RS and the output is this rank's rows [m_r, out_features];
    without, GEMM+AR and the output is all rows on every rank.
    batch_first=True: [b, s, in_local] inputs, [b, s_r, out] outputs.
    skip_bias_add=True: forward returns (y, bias) without adding the bias;
    with sequence parallelism its gradient is summed over the ranks in the
    backward, so it is the full sum on every rank as when the layer adds it.
    partial_dtype ("fp32" or "output"): the partials the forward's GEMM+RS
    (GEMM+AR without sequence parallelism) sends, the same on every rank;
    gemm_reduction ("any" or "fp32"): the commgemm GEMMs'; None: the comm's
    (docs/PYTHON.md, Precision). extra_repr names both. fp8_recipe: as
    ColumnParallelLinear's.
    """

    def __init__(self, in_features, out_features, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, skip_bias_add=False, partial_dtype=None, gemm_reduction=None,
                 partition_multiple=None, partition_sizes=None, batch_first=False, fp8_recipe=None):
        self.partition = partition(in_features, comm, partition_multiple, partition_sizes, type(self).__name__,
                                   "in_features")
        in_local = self.partition[comm.rank]
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype, device, backend,
                         (out_features, in_local), out_features, skip_bias_add, partial_dtype, gemm_reduction,
                         batch_first)
        self.in_local = in_local
        self.in_offset = sum(self.partition[:comm.rank])
        self.fp8_recipe = fp8_recipe
        self.reset_parameters()

    def _weight_shard(self, full):
        return full[:, self.in_offset:self.in_offset + self.in_local]

    def _bias_shard(self, full):
        return full

    def forward(self, x):
        what = type(self).__name__
        x2, lead = self._rows(x)
        problem = None
        if x2.shape[-1] != self.in_local:
            problem = (f"{what}: input has shape {tuple(x.shape)}: its last dimension is {x2.shape[-1]}, expected "
                       f"in_local = {self.in_local}, rank {self.comm.rank}'s shard of in_features = "
                       f"{self.in_features} (partition {list(self.partition)}); feed it the output of a "
                       "ColumnParallelLinear with the same partition (partition_multiple / partition_sizes)")
        x2, weight, bias = _autocast(x2, self.weight, self.bias)
        if self.skip_bias_add:
            bias = None
        rt, comm, (pd, gr) = self._rt, self.comm, self._precision_args()
        grad = torch.is_grad_enabled()
        if self.fp8_recipe is not None:
            if self.sequence_parallel:
                check_positions(what, lead, x2.shape[0], comm)
            run = _fp8.layer_run(self, x2, weight, bias, None, "rs" if self.sequence_parallel else "ar")
        elif self.sequence_parallel:
            check_positions(what, lead, x2.shape[0], comm)
            if grad:
                def run():
                    return _MatmulReduceScatter.apply(x2, weight, bias, comm.id, rt, pd, gr)
            else:
                def run():
                    return _ops.matmul_reduce_scatter(x2, weight, bias, comm.id, "TN", rt.backend, pd, gr)
        elif grad:
            def run():
                return _MatmulAllReduce.apply(x2, weight, bias, comm.id, rt.backend, pd, gr)
        else:
            def run():
                return _ops.matmul_all_reduce(x2, weight, bias, comm.id, "TN", rt.backend, pd, gr)
        y = self._unrows(_collective_call(run, problem), lead)
        if not self.skip_bias_add:
            return y
        # The caller adds the bias to this rank's rows only (sequence
        # parallel): its gradient is summed over the ranks on the way back.
        if self.bias is not None and self.sequence_parallel and grad:
            return y, _BiasSummedOverRanks.apply(self.bias, comm.id, rt.backend, pd, comm.size)
        return y, self.bias

    def extra_repr(self):
        return (f"in_features={_features_repr(self.in_features, self.partition, self.comm.rank)}, "
                f"out_features={self.out_features}, {self._common_repr()}")


class ParallelMLP(torch.nn.Module):
    """Megatron's MLP block: fc2(gelu(fc1(x))) with fc1 a ColumnParallelLinear(activation="gelu")
    [hidden -> ffn_hidden, features split over the ranks] and fc2 a RowParallelLinear
    [ffn_hidden -> hidden], the same as nn.Sequential(Linear, GELU(approximate="tanh"), Linear)
    on the full X.

    With sequence_parallel (default) the input is this rank's rows [m_r, hidden] (or
    [s_r, b, hidden]; batch_first [b, s_r, hidden]) and so is the output. Where the comm's
    backends take epilogues (Comm.supports("epilogue") and ("bulk_epilogue")), the forward is one
    AG+GEMM whose GELU_AUX epilogue applies the GELU (keeping the pre-activation) and one GEMM+RS;
    the backward's fc2 dgrad is one AG+GEMM whose DGELU_BGRAD epilogue multiplies by gelu' and
    writes fc1's bias gradient, and fc2's weight gradient is one GEMM whose BGRAD epilogue writes
    fc2's bias gradient (docs/EPILOGUES.md). Elsewhere (and without sequence parallelism) it runs
    fc1 and fc2 as the layers do. m: the total rows (as ColumnParallelLinear's).
    Options: the layers' (dtype, device, backend, partial_dtype, gemm_reduction,
    partition_multiple, partition_sizes, batch_first), given to both."""

    def __init__(self, hidden_size, ffn_hidden_size, comm, bias=True, sequence_parallel=True, dtype=None,
                 device=None, backend=None, partial_dtype=None, gemm_reduction=None, partition_multiple=None,
                 partition_sizes=None, batch_first=False):
        super().__init__()
        shared = {"comm": comm, "bias": bias, "sequence_parallel": sequence_parallel, "dtype": dtype,
                  "device": device, "backend": backend, "partial_dtype": partial_dtype,
                  "gemm_reduction": gemm_reduction, "partition_multiple": partition_multiple,
                  "partition_sizes": partition_sizes, "batch_first": batch_first}
        self.fc1 = ColumnParallelLinear(hidden_size, ffn_hidden_size, activation="gelu", **shared)
        self.fc2 = RowParallelLinear(ffn_hidden_size, hidden_size, **shared)

    @classmethod
    def from_linears(cls, fc1, fc2, comm, **options):
        """This rank's shards of a full MLP's two nn.Linear (the same values on every rank)."""
        if fc2.in_features != fc1.out_features or fc2.out_features != fc1.in_features:
            raise _invalid(f"ParallelMLP.from_linears: fc1 is {fc1.in_features} -> {fc1.out_features} and fc2 "
                           f"{fc2.in_features} -> {fc2.out_features}: expected hidden -> ffn and ffn -> hidden")
        if (fc1.bias is None) != (fc2.bias is None):
            raise _invalid("ParallelMLP.from_linears: one Linear has a bias and the other not: expected both or "
                           "neither")
        mlp = cls(fc1.in_features, fc1.out_features, comm, bias=fc1.bias is not None, dtype=fc1.weight.dtype,
                  device=fc1.weight.device, **options)
        with torch.no_grad():
            for mine, full in ((mlp.fc1, fc1), (mlp.fc2, fc2)):
                mine.weight.copy_(mine._weight_shard(full.weight))
                if mine.bias is not None:
                    mine.bias.copy_(mine._bias_shard(full.bias))
        return mlp

    def _fused(self):
        """Whether the forward and backward run as one sequence of epilogue ops."""
        rt1, rt2 = self.fc1._rt, self.fc2._rt
        return (self.fc1.sequence_parallel and torch.is_grad_enabled() and rt1 == rt2 and rt1.epilogue
                and self.fc1.fp8_recipe is None and self.fc2.fp8_recipe is None
                and rt1.gathered and rt1.bulk_epilogue
                and all(self.fc1.comm.epilogue_fits(w, rt1.backend) for w in self.fc1.partition)
                and self.fc1._precision_args() == self.fc2._precision_args())

    def forward(self, x, m=None):
        if not self._fused():
            h = self.fc1(x, m) if self.fc1.sequence_parallel else self.fc1(x)
            return self.fc2(h)
        fc1, fc2 = self.fc1, self.fc2
        x2, lead, problem = fc1._input_rows(x)
        x2, w1, b1 = _autocast(x2, fc1.weight, fc1.bias)
        _, w2, b2 = _autocast(x2, fc2.weight, fc2.bias)
        m, problem, hint = fc1._sequence_m(x2, lead, m, problem)
        pd, gr = fc1._precision_args()
        comm, rt = fc1.comm, fc1._rt

        def run():
            return _ParallelMLP.apply(x2, w1, b1, w2, b2, comm.id, m, rt, pd, gr)
        return fc2._unrows(_collective_call(run, problem, hint), lead)

    def extra_repr(self):
        return f"hidden_size={self.fc1.in_features}, ffn_hidden_size={self.fc1.out_features}"
