/* mxu_int.h — internals shared by mxu.c, mxu_ref.c and the AVX2 microkernel (not for callers
 * outside accel/). */
#ifndef TF_MXU_INT_H
#define TF_MXU_INT_H

#include <stddef.h>
#include <stdint.h>

#include "accel/mxu.h"

/* Register block of the microkernels: MR rows of op(X) by NR columns of op(W). */
#define TF_MXU_MR 6
#define TF_MXU_NR 16

/* Microkernel: c[MR x NR] (leading dimension ldc) += per K-tile sums, for kc values of k that
 * start on a tile boundary; a is packed [kc][MR], b is packed [kc][NR], tiles are R long. */
void tf_mxu_ukernel_avx2(size_t kc, size_t R, const float *a, const float *b, float *c,
			 size_t ldc);

/* The MXCSR word the contract asks for (round to nearest, exceptions masked, FTZ+DAZ iff ftz),
 * and helpers to enter and leave it. Return the previous word. */
unsigned tf_mxu_csr_enter(int ftz);
void tf_mxu_csr_leave(unsigned saved);

/* Writes every NaN of the M x N block as 0x7FC00000. */
void tf_mxu_canon_nan(size_t M, size_t N, float *C, size_t ldc);

/* The normalised configuration (defaults filled in). */
void tf_mxu_cfg_norm(const struct tf_mxu_cfg *in, struct tf_mxu_cfg *out);

/* Fills the model-derived parts of stats (folds, macs, mapping efficiency) and, from `cycles`,
 * utilization. */
void tf_mxu_stats_fill(const struct tf_mxu_cfg *cfg, size_t M, size_t K, size_t N,
		       uint64_t cycles, struct tf_mxu_stats *stats);

#endif
