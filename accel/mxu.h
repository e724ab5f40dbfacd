/* mxu.h — the emulated matrix unit: one GEMM contract, a fast kernel and a cycle-level
 * reference model that give the same bits, plus SCALE-Sim's analytical cycle model.
 *
 * The systolic contract (weight-stationary, docs/accel.md): C[MxN] = op(X)[MxK] . op(W)[KxN].
 *   1. Every input is rounded fp32 -> bf16 -> fp32 (tf_bf16_round with cfg->ftz).
 *   2. K is cut into tiles of R = cfg->rows: [0,R), [R,2R), ... (a "fold" loads one K-tile x
 *      N-tile of W into the R x C array).
 *   3. Per output (m, n): acc = +0; for each K-tile in ascending order: s = +0, then
 *      s = fmaf(x[m,k], w[k,n], s) for k ascending within the tile; acc = acc + s.
 *   4. Round to nearest; with cfg->ftz every fmaf / acc + s result that is subnormal is
 *      flushed to a signed zero (MXCSR FTZ+DAZ; in software where there is no MXCSR). A
 *      product is not flushed on its own, so a tiny product survives when added to a nonzero
 *      sum: 2^-126 + 2^-127 gives 1.5 * 2^-126 in that order and 2^-126 in the other.
 *      Gradual underflow without ftz. The caller's MXCSR is restored on return.
 *   5. A NaN output is written as the canonical quiet NaN 0x7FC00000, so the result does not
 *      depend on which NaN operand the hardware happened to propagate.
 * The fast kernel parallelises over M and N only; it never splits or reorders K within a tile,
 * so its result is bit-identical to the reference for any thread count.
 *
 * op(X) is X (M x K, row-major, leading dimension ldx >= K) or, with trans_x, the transpose of
 * a K x M array (ldx >= M). op(W) is W (K x N, ldw >= N) or, with trans_w, the transpose of an
 * N x K array (ldw >= K). C is M x N with ldc >= N; it is overwritten. For the backward pass
 * of Y = X.W: dW = X^T.dY is (trans_x = 1), dX = dY.W^T is (trans_w = 1). */
#ifndef TF_MXU_H
#define TF_MXU_H

#include <stddef.h>
#include <stdint.h>

struct tf_mxu_cfg {
	int rows, cols; /* systolic array R x C; 0 means 128 */
	int ftz;        /* 1: flush subnormals (TPU mode, the default from tf_mxu_cfg_init) */
	int threads;    /* host threads for the fast kernel; 0 or 1 means the calling thread */
	int mxus;       /* MXUs in the core the folds are spread over (cycle count only); 0 = 1 */
};

struct tf_mxu_stats {
	uint64_t cycles;           /* device cycles of this GEMM on one core (folds spread over
	                              cfg->mxus arrays), from the analytical WS model or, for
	                              the reference, counted by the simulation */
	uint64_t folds;            /* weight tiles loaded: ceil(K/R) * ceil(N/C) */
	uint64_t macs;             /* M * N * K */
	double utilization;        /* macs / (cycles * R * C * mxus) */
	double mapping_efficiency; /* mean over folds of rows_used * cols_used / (R * C) */
};

/* Defaults: 128 x 128, ftz on, 1 thread, 1 MXU. */
void tf_mxu_cfg_init(struct tf_mxu_cfg *cfg);

/* The fast kernel (AVX-512 BF16 or AVX2/FMA when the CPU has them, portable C otherwise).
 * stats may be NULL. */
void tf_mxu_gemm(const struct tf_mxu_cfg *cfg, int trans_x, int trans_w, size_t M, size_t K,
                 size_t N, const float *X, size_t ldx, const float *W, size_t ldw, float *C,
                 size_t ldc, struct tf_mxu_stats *stats);

/* The cycle-level reference: an R x C grid of processing elements whose registers shift one
 * step per cycle (weights shifted in per fold, inputs skewed in from the left, partial sums
 * flowing down the columns). Slow (M*N*K*... per-PE steps) and single-threaded by design;
 * cfg->threads is ignored. stats->cycles is the count the simulation reached. */
void tf_mxu_gemm_reference(const struct tf_mxu_cfg *cfg, int trans_x, int trans_w, size_t M,
                           size_t K, size_t N, const float *X, size_t ldx, const float *W,
                           size_t ldw, float *C, size_t ldc, struct tf_mxu_stats *stats);

/* Which fast path tf_mxu_gemm runs: "avx512" (CPUs with AVX512-BF16, chosen at run time
 * after a known-answer check; it covers TPU mode (ftz) with an even cfg->rows, other
 * configurations run the AVX2 code), "avx2" or "portable". */
const char *tf_mxu_kernel_name(void);
/* Runs the named path (one of the above) or, for NULL or "", the best one this CPU has; for
 * tests and benchmarks. 0, -ENOTSUP (the CPU lacks it) or -EINVAL (unknown name). */
int tf_mxu_force_kernel(const char *name);

/* op(W) packed once for many GEMMs that share it (the replicas of a data-parallel step all
 * multiply by the same weights): rounded to bf16 and laid out for the kernel when packed,
 * instead of once per GEMM. Same bits as tf_mxu_gemm. A pack is not thread-safe to set, but
 * any number of threads may run tf_mxu_gemm_wpack on it at once. */
struct tf_mxu_wpack;                         /* opaque */
struct tf_mxu_wpack *tf_mxu_wpack_new(void); /* empty; caller frees with tf_mxu_wpack_free */
void tf_mxu_wpack_free(struct tf_mxu_wpack *p);
/* The shape of the packed op(W): K x N (0 x 0 before the first set). */
void tf_mxu_wpack_shape(const struct tf_mxu_wpack *p, size_t *K, size_t *N);
/* (Re)packs op(W) (K x N, trans_w and ldw as for tf_mxu_gemm) for GEMMs under cfg (its rows
 * and ftz). W is borrowed: it must stay unchanged until the next set or the free (paths that
 * do not use the packed form read it, e.g. the AVX2 kernel). Reuses the pack's memory. */
void tf_mxu_wpack_set(struct tf_mxu_wpack *p, const struct tf_mxu_cfg *cfg, int trans_w, size_t K,
                      size_t N, const float *W, size_t ldw);
/* tf_mxu_gemm(cfg, trans_x, p's trans_w, M, p's K, p's N, X, ldx, p's W, p's ldw, C, ldc,
 * stats), with the packed op(W) when cfg matches the packing. */
void tf_mxu_gemm_wpack(const struct tf_mxu_cfg *cfg, int trans_x, size_t M, const float *X,
                       size_t ldx, const struct tf_mxu_wpack *p, float *C, size_t ldc,
                       struct tf_mxu_stats *stats);

/* Elements [lo, hi) of that GEMM's M x N result, row-major (element i * N + j is C[i][j]),
 * written to out[0 .. hi - lo): the whole rows the range covers through the pack, a partial
 * first or last row through a GEMM of just its columns of op(W) (read from the borrowed W).
 * The same bits as those elements of the whole product: a data-parallel all-reduce can make a
 * replica's gradient one cache-sized block at a time (tf_slice_allreduce_gen). hi is capped at
 * M * N. */
void tf_mxu_gemm_wpack_range(const struct tf_mxu_cfg *cfg, int trans_x, size_t M, const float *X,
                             size_t ldx, const struct tf_mxu_wpack *p, size_t lo, size_t hi,
                             float *out);

/* SCALE-Sim's analytical model (scalesim/compute/systolic_compute_{ws,os}.py). */
enum tf_mxu_dataflow {
	TF_MXU_WS, /* weight-stationary: rows <- K, cols <- N, streamed T = M */
	TF_MXU_OS, /* output-stationary: rows <- M, cols <- N, streamed T = K */
	TF_MXU_IS, /* input-stationary: rows <- K, cols <- M, streamed T = N */
	TF_MXU_DATAFLOW_LAST
};

struct tf_mxu_model {
	uint64_t folds;            /* array loads */
	uint64_t cycles_per_fold;  /* WS, IS: 2R + C + T - 2; OS: R + C + T - 2 */
	uint64_t cycles;           /* folds * cycles_per_fold: one array doing every fold */
	uint64_t scalesim_total;   /* what SCALE-Sim reports: cycles - 1 (last 0-based cycle) */
	uint64_t core_cycles;      /* ceil(folds / mxus) * cycles_per_fold */
	double mapping_efficiency; /* mean over folds of used rows * used cols / (R * C) */
	double utilization;        /* M*N*K / (cycles * R * C) (one array) */
	double core_utilization;   /* M*N*K / (core_cycles * R * C * mxus) */
	/* SCALE-Sim's own definitions (its COMPUTE_REPORT, stall-free): */
	double scalesim_utilization; /* "Overall Util": M*N*K / (scalesim_total * R * C) */
	double compute_utilization;  /* "Compute Util": mean over folds of used PEs * T /
	                                (R * C * fold cycles), fold cycles 2R + 2C + T - 3
	                                (ws, is) or R + C + T - 2 (os) */
};

/* Fills *out for an M x K . K x N GEMM on R x C arrays (mxus of them, 0 = 1). Returns 0, or
 * -EINVAL when R or C is not positive or the dataflow is unknown, -EOVERFLOW when the cycle
 * count would pass 2^63 (out untouched). Zero-sized GEMMs give 0 folds and 0 cycles. */
int tf_mxu_model(enum tf_mxu_dataflow df, uint64_t M, uint64_t K, uint64_t N, int R, int C,
                 int mxus, struct tf_mxu_model *out);

#endif
