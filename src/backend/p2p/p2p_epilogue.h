/* The p2p backend's epilogues (p2p_epilogue.c): AG+GEMM's chunked
 * algorithms (split, ring, no_overlap), bulk's GEMM and every op on one
 * rank, through cuBLASLt's epilogues on the final GEMM steps; GEMM+RS's
 * GELU, GELU_AUX and DGELU in its final reduce; the fused algorithm's in
 * its kernel (cgm_hgemm's epilogue). */
#ifndef COMMGEMM_P2P_EPILOGUE_H
#define COMMGEMM_P2P_EPILOGUE_H

#include "backend/p2p/p2p_views.h"
#include "device/hopper_gemm.h"

/* The check hook's rules: CGM_SUCCESS for NONE; CGM_ERROR_NOT_SUPPORTED,
 * saying what to do, for GEMM+AR and GEMM+RS's DGELU_BGRAD on more than
 * one rank (the nccl backend runs them), and cgm_gpu_epilogue_check's. */
cgm_status p2p_epilogue_check(const cgm_comm *comm, const cgm_call *call);
/* Before the dry pass: the bias-gradient slots of the call's GEMM steps
 * (grown at eager calls; inside capture one eager call with the same
 * shapes must have come first). Sets x->epi_base and x->epi_slots. */
cgm_status p2p_epi_setup(p2p_exec_ctx *x, bool capturing);
/* A final GEMM step's epilogue fields (bulk: the one local GEMM): aux at
 * its rows, its own slot for a bias gradient. No-op for NONE. */
void p2p_epi_args(const p2p_exec_ctx *x, const plan_step *s, bool bulk,
                  cgm_lt_gemm_args *g);
/* GEMM+RS's final reduce step (the owner's rows): the epilogue, aux at
 * the step's rows. No-op otherwise. */
void p2p_epi_reduce(const p2p_exec_ctx *x, const plan_step *s,
                    cgm_dev_reduce_args *a);
/* After the join, on the caller's stream: the slots summed in row order
 * and rounded once into bgrad. */
cgm_status p2p_epi_finish(const p2p_exec_ctx *x, cudaStream_t caller);

/* The fused algorithm's (p2p_fused_ops.c). Before the fork: DGELU_BGRAD's
 * workspace (the kernel's slots, cgm_hgemm_bgrad_ws_bytes; grown at eager
 * calls as p2p_epi_setup). */
cgm_status p2p_epi_fused_setup(p2p_state *st, const cgm_call *c,
                               bool capturing);
/* The kernel's epilogue fields (AG's gathered output, RS's own rows: aux
 * as the call's, bgrad through the workspace). No-op for NONE. */
void p2p_epi_fused_kernel(const p2p_state *st, const cgm_call *c,
                          cgm_hgemm_args *a);
/* A rank without the kernel: AG's one cuBLASLt GEMM gets the epilogue
 * (bgrad into the workspace's one slot), and after it
 * p2p_epi_fused_lt_finish rounds that slot into bgrad on `stream`; RS's
 * reduce of its own rows from row0 (of this rank's Y) gets the epilogue
 * with aux at row0. */
void p2p_epi_fused_lt(const p2p_state *st, const cgm_call *c,
                      cgm_lt_gemm_args *g);
cgm_status p2p_epi_fused_lt_finish(const p2p_state *st, const cgm_call *c,
                                   cudaStream_t stream);
void p2p_epi_fused_reduce(const cgm_call *c, int64_t row0,
                          cgm_dev_reduce_args *a);

#endif
