/* The public op entry points: validate, pick the backend, let the
 * autotuner choose what the caller left open, dispatch. */
#include "core.h"
#include "tune/tune.h"

/* A call this rank rejected: its op backend's peers may be waiting in the
 * call's agreement exchange (the host backend checks every call), so the
 * backend tells them (vtable `rejected`) instead of letting them wait out
 * timeout_ms. */
static cgm_status rejected(cgm_comm *comm, cgm_op op, cgm_status status) {
    cgm_backend b = comm->config.op_backend[op];
    const cgm_backend_vtable *vt = cgm_backend_lookup(b);
    if (vt && vt->rejected && comm->backend_state[b])
        vt->rejected(comm, comm->backend_state[b], op, status);
    return status;
}

static const char *const fns[] = {"cgm_all_gather_gemm", "cgm_gemm_reduce_scatter", "cgm_gemm_all_reduce",
                                  "cgm_bulk_overlap"};

/* The call on a comm this thread holds (cgm_comm_enter). */
static cgm_status dispatch_held(cgm_comm *comm, cgm_op op, const cgm_matrix *x, const cgm_matrix *w,
                                const cgm_matrix *bias, cgm_matrix *y, cgm_matrix *xg, cgm_collective coll,
                                const cgm_matrix *send, cgm_matrix *recv, const cgm_op_options *options,
                                void *stream) {
    cgm_status st;
    /* Surface an asynchronous failure of earlier device work first. */
    cgm_status async_error;
    if (cgm_comm_get_async_error(comm, &async_error) == CGM_SUCCESS && async_error != CGM_SUCCESS)
        return async_error;
    cgm_call call;
    st = cgm_validate_op(comm, op, x, w, bias, y, xg, coll, send, recv, options, stream, &call);
    if (st != CGM_SUCCESS) return rejected(comm, op, st);
    st = cgm_comm_backend_ready(comm, call.backend);
    if (st != CGM_SUCCESS) return cgm_error_context(st, "%s", fns[op]);
    const cgm_backend_vtable *vt = cgm_backend_lookup(call.backend);
    void *state = comm->backend_state[call.backend];
    /* A call this backend does not run (fp8 on a GPU backend) is refused
     * before the tuner measures it or any rank exchanges anything. */
    if (vt->check && (st = vt->check(comm, &call)) != CGM_SUCCESS)
        return rejected(comm, op, cgm_error_context(st, "%s", fns[op]));
    comm->calls++;
    CGM_TRACE(CGM_SUB_CALL, "%s #%llu backend=%s m=%lld n=%lld k=%lld layout=%s", fns[op],
              (unsigned long long)comm->calls, vt->name, (long long)call.m, (long long)call.n,
              (long long)call.k, cgm_layout_name(call.layout));
    /* Where algo and splits were left open, the tuner sets them (measuring
     * the candidates with this call's buffers on first use of its key); the
     * real call below is always the last execution. */
    st = cgm_tune_resolve(comm, vt, state, &call);
    if (st == CGM_SUCCESS) st = vt->run(comm, state, &call);
    if (st == CGM_ERROR_TIMEOUT || st == CGM_ERROR_PEER_FAILED) cgm_comm_mark_broken(comm, st);
    return st;
}

static cgm_status dispatch(cgm_comm *comm, cgm_op op, const cgm_matrix *x, const cgm_matrix *w,
                           const cgm_matrix *bias, cgm_matrix *y, cgm_matrix *xg, cgm_collective coll,
                           const cgm_matrix *send, cgm_matrix *recv, const cgm_op_options *options,
                           void *stream) {
    /* A second thread's call is refused here, before it touches the comm. */
    cgm_status st = cgm_comm_enter(comm, fns[op]);
    if (st != CGM_SUCCESS) return st;
    st = dispatch_held(comm, op, x, w, bias, y, xg, coll, send, recv, options, stream);
    cgm_comm_leave(comm);
    return st;
}

cgm_status cgm_all_gather_gemm(cgm_comm *comm, const cgm_matrix *x_shard, const cgm_matrix *w,
                               const cgm_matrix *bias, cgm_matrix *y, cgm_matrix *x_gathered,
                               const cgm_op_options *options, void *stream) {
    return dispatch(comm, CGM_OP_ALL_GATHER_GEMM, x_shard, w, bias, y, x_gathered, CGM_COLLECTIVE_ALL_GATHER,
                    NULL, NULL, options, stream);
}

cgm_status cgm_gemm_reduce_scatter(cgm_comm *comm, const cgm_matrix *x, const cgm_matrix *w,
                                   const cgm_matrix *bias, cgm_matrix *y_shard, const cgm_op_options *options,
                                   void *stream) {
    return dispatch(comm, CGM_OP_GEMM_REDUCE_SCATTER, x, w, bias, y_shard, NULL, CGM_COLLECTIVE_REDUCE_SCATTER,
                    NULL, NULL, options, stream);
}

cgm_status cgm_gemm_all_reduce(cgm_comm *comm, const cgm_matrix *x, const cgm_matrix *w, const cgm_matrix *bias,
                               cgm_matrix *y, const cgm_op_options *options, void *stream) {
    return dispatch(comm, CGM_OP_GEMM_ALL_REDUCE, x, w, bias, y, NULL, CGM_COLLECTIVE_REDUCE_SCATTER, NULL, NULL,
                    options, stream);
}

cgm_status cgm_bulk_overlap(cgm_comm *comm, const cgm_matrix *a, const cgm_matrix *b, const cgm_matrix *bias,
                            cgm_matrix *c, cgm_collective collective, const cgm_matrix *send, cgm_matrix *recv,
                            const cgm_op_options *options, void *stream) {
    return dispatch(comm, CGM_OP_BULK, a, b, bias, c, NULL, collective, send, recv, options, stream);
}
