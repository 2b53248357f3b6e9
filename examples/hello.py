"""Hello, commgemm, from Python: an AG+GEMM and a GEMM+RS on the host backend
(numpy arrays), each checked against numpy on every rank.

    commgemm-run -n 2 python3 examples/hello.py     # after pip install ./python

Ranks come from the launcher (commgemm-run, torchrun or mpirun). Every rank
builds the same full X [m, k] and W [n, k] from one seed and keeps its part:
for AG+GEMM its rows of X (the ceil split of m) and its rows of W (its n_r
output features); for GEMM+RS its columns of X and W (its slice of k).
Exit status 1 when a result is wrong.
"""

import sys

import numpy as np

import commgemm


def part(total, rank, nranks):
    """This rank's slice of `total` rows (the ceil split)."""
    start = commgemm.shard_offset(total, rank, nranks)
    return slice(start, start + commgemm.shard_rows(total, rank, nranks))


def main():
    m, n, k = 100, 48, 64  # any sizes: uneven shards are fine
    with commgemm.Comm.from_env(backend="host", max_m=m, max_n=n, max_k=k) as comm:
        r, P = comm.rank, comm.size
        rng = np.random.default_rng(1234)
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)

        # AG+GEMM: Y[m, n_r] = allgather(X_r) . W_r^T
        y = commgemm.all_gather_gemm(comm, x[part(m, r, P)], w[part(n, r, P)], m=m)
        ag_err = float(np.max(np.abs(y - x @ w[part(n, r, P)].T), initial=0.0))

        # GEMM+RS: Y_r[m_r, n] = this rank's rows of sum over ranks of X[:, k_r] . W[:, k_r]^T
        y_r = commgemm.gemm_reduce_scatter(comm, x[:, part(k, r, P)], w[:, part(k, r, P)])
        rs_err = float(np.max(np.abs(y_r - (x @ w.T)[part(m, r, P)]), initial=0.0))

        ok = ag_err <= 1e-3 and rs_err <= 1e-3
        if r == 0:
            print(f"commgemm {commgemm.__version__} from {commgemm.library_path()}, {P} ranks, "
                  f"backend {comm.backend('ag_gemm')}", flush=True)
        print(f"rank {r}/{P}: ag_gemm [{m}x{n}x{k}] max error {ag_err:.2e}, gemm_rs max error {rs_err:.2e}: "
              f"{'OK' if ok else 'WRONG'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
