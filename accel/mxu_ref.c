/* mxu_ref.c — the cycle-level reference MXU: a weight-stationary R x C systolic array simulated
 * one clock at a time. Slow and meant to be obviously right; the fast kernel (mxu.c) must give
 * the same bits.
 *
 * Each processing element PE(r, c) has three registers: its weight (plus a flag saying whether
 * a weight of the current fold was loaded there), the input value it passes right, and the
 * partial sum it passes down. Per fold (one K-tile x N-tile of op(W)):
 *   - weight load, R cycles: every cycle each column shifts its weights down one row and row 0
 *     takes the next tile row (the last tile row first), so after R cycles PE(r, c) holds
 *     w[k0 + r, n0 + c];
 *   - streaming: array row r receives x[m, k0 + r] at cycle m + r (inputs skewed by row), each
 *     PE passes its input right one column per cycle, row 0 starts every partial sum at +0 and
 *     each PE holding a weight computes s' = fmaf(x, w, s) and passes it down; rows without a
 *     weight of this fold (K-tile shorter than R) pass s through untouched;
 *   - the partial sum leaving the bottom of column c at cycle m + R - 1 + c is output (m, n0+c):
 *     acc = acc + s. The fold ends when every row m has left every column.
 * Cycles are counted as they are simulated; folds are dealt round-robin to cfg->mxus arrays and
 * the busiest array's count is the core's. New register values are computed from the previous
 * cycle's (two banks, swapped each cycle), as clocked registers behave. */
#include "accel/mxu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "accel/bf16.h"
#include "accel/mxu_int.h"
#include "common/common.h"

/* One bank of the array's registers, each R*C, indexed r*C + c. */
struct bank {
	float *w;  /* weight */
	char *wok; /* 1 when the weight belongs to the current fold's K-tile and N-tile */
	float *x;  /* input moving right */
	long *xm;  /* row m of the input in x, -1 when empty */
	float *s;  /* partial sum moving down */
	long *sm;  /* row m the partial sum belongs to, -1 when empty */
};

static void bank_alloc(struct bank *b, size_t n)
{
	b->w = tf_xcalloc(n, sizeof *b->w);
	b->wok = tf_xcalloc(n, sizeof *b->wok);
	b->x = tf_xcalloc(n, sizeof *b->x);
	b->xm = tf_xcalloc(n, sizeof *b->xm);
	b->s = tf_xcalloc(n, sizeof *b->s);
	b->sm = tf_xcalloc(n, sizeof *b->sm);
}

static void bank_free(struct bank *b)
{
	free(b->w);
	free(b->wok);
	free(b->x);
	free(b->xm);
	free(b->s);
	free(b->sm);
}

static float opx(int trans, const float *X, size_t ld, size_t m, size_t k, int ftz)
{
	return tf_bf16_round(trans ? X[k * ld + m] : X[m * ld + k], ftz);
}

static float opw(int trans, const float *W, size_t ld, size_t k, size_t n, int ftz)
{
	return tf_bf16_round(trans ? W[n * ld + k] : W[k * ld + n], ftz);
}

void tf_mxu_gemm_reference(const struct tf_mxu_cfg *cfg_in, int trans_x, int trans_w, size_t M,
                           size_t K, size_t N, const float *X, size_t ldx, const float *W,
                           size_t ldw, float *Cout, size_t ldc, struct tf_mxu_stats *stats)
{
	struct tf_mxu_cfg cfg;
	tf_mxu_cfg_norm(cfg_in, &cfg);
	const size_t R = (size_t)cfg.rows, C = (size_t)cfg.cols;
	const int ftz = cfg.ftz;
	uint64_t *busy = tf_xcalloc((size_t)cfg.mxus, sizeof *busy);
	uint64_t fold = 0;

	for (size_t m = 0; m < M; m++)
		memset(Cout + m * ldc, 0, N * sizeof(float)); /* acc = +0 */

	unsigned saved = tf_mxu_csr_enter(ftz);
	struct bank cur, nxt;
	bank_alloc(&cur, R * C);
	bank_alloc(&nxt, R * C);

	for (size_t n0 = 0; M && n0 < N; n0 += C) {
		size_t nu = N - n0 < C ? N - n0 : C;
		for (size_t k0 = 0; k0 < K; k0 += R) {
			size_t ku = K - k0 < R ? K - k0 : R;
			uint64_t cycles = 0;

			/* Weight load: R shifts down the columns. */
			for (size_t j = 0; j < R; j++, cycles++) {
				size_t row = R - 1 - j; /* tile row entering at the top */
				for (size_t r = 0; r < R; r++) {
					for (size_t c = 0; c < C; c++) {
						size_t i = r * C + c;
						if (r == 0) {
							int ok = row < ku && c < nu;
							nxt.wok[i] = (char)ok;
							nxt.w[i] = ok ? opw(trans_w, W, ldw,
							                    k0 + row, n0 + c, ftz)
							              : 0.0f;
						} else {
							nxt.wok[i] = cur.wok[i - C];
							nxt.w[i] = cur.w[i - C];
						}
					}
				}
				struct bank t = cur;
				cur = nxt;
				nxt = t;
			}
			/* Weights stay; inputs and partial sums start empty. */
			memcpy(nxt.w, cur.w, R * C * sizeof *cur.w);
			memcpy(nxt.wok, cur.wok, R * C);
			for (size_t i = 0; i < R * C; i++)
				cur.xm[i] = cur.sm[i] = -1;

			/* Streaming: until every row m has left the bottom of every column. */
			size_t outputs = 0;
			for (size_t t = 0; outputs < M * C; t++, cycles++) {
				for (size_t r = 0; r < R; r++) {
					for (size_t c = 0; c < C; c++) {
						size_t i = r * C + c;
						float xin = 0.0f, sin = 0.0f;
						long xm = -1, sm;
						if (c == 0) {
							/* skewed feed: row r gets x[t - r, k0 + r]
							 */
							if (t >= r && t - r < M) {
								xm = (long)(t - r);
								if (r < ku)
									xin =
									    opx(trans_x, X, ldx,
									        t - r, k0 + r, ftz);
							}
						} else {
							xm = cur.xm[i - 1];
							xin = cur.x[i - 1];
						}
						if (r == 0) {
							sm =
							    xm; /* a new partial sum starts at +0 */
							sin = 0.0f;
						} else {
							sm = cur.sm[i - C];
							sin = cur.s[i - C];
						}
						nxt.x[i] = xin;
						nxt.xm[i] = xm;
						nxt.sm[i] = sm;
						float f = (sm >= 0 && cur.wok[i])
						              ? fmaf(xin, cur.w[i], sin)
						              : sin;
						nxt.s[i] = ftz ? tf_mxu_ftz(f) : f;
					}
				}
				struct bank tb = cur;
				cur = nxt;
				nxt = tb;
				memcpy(nxt.w, cur.w, R * C * sizeof *cur.w);
				memcpy(nxt.wok, cur.wok, R * C);
				/* The bottom row's partial sums leave the array. */
				for (size_t c = 0; c < C; c++) {
					size_t i = (R - 1) * C + c;
					if (cur.sm[i] < 0)
						continue;
					outputs++;
					if (c < nu) {
						float *acc =
						    Cout + (size_t)cur.sm[i] * ldc + n0 + c;
						float sum = *acc + cur.s[i];
						*acc = ftz ? tf_mxu_ftz(sum) : sum;
					}
				}
			}
			busy[fold % (uint64_t)cfg.mxus] += cycles;
			fold++;
		}
	}
	bank_free(&cur);
	bank_free(&nxt);
	tf_mxu_csr_leave(saved);
	tf_mxu_canon_nan(M, N, Cout, ldc);

	if (stats) {
		uint64_t most = 0;
		for (int i = 0; i < cfg.mxus; i++)
			if (busy[i] > most)
				most = busy[i];
		tf_mxu_stats_fill(&cfg, M, K, N, most, stats);
	}
	free(busy);
}
