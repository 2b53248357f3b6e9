/* The epilogues' rules (validate_epilogue.c), for validate.c. */
#ifndef COMMGEMM_VALIDATE_EPILOGUE_H
#define COMMGEMM_VALIDATE_EPILOGUE_H

#include "core.h"

/* One matrix's own fields, as validate.c checks every operand: dtype,
 * dims, ld, span, data present and aligned, no scale (validate.c). */
cgm_status cgm_check_operand(const char *fn, const char *name, const cgm_matrix *m);
/* The call's epilogue (call->epilogue, aux, bgrad, taken from the
 * options) against its validated GEMM operands (`yn`: Y's name in
 * messages): a known value, the op and operands it takes, bias and
 * accumulate, aux's and bgrad's shape and dtype. Their memory and overlaps
 * are checked with the other operands' (validate.c). */
cgm_status cgm_check_epilogue(const char *fn, const char *yn, const cgm_call *call);

#endif
