/* layersim.c — the SCALE-Sim-compatible layer simulator (layersim.h): demand generation per
 * dataflow, the double-buffered read buffers (USER: a fixed DRAM bandwidth, stalls when data
 * is late; CALC: no stalls, the bandwidth needed is estimated), the ofmap write buffer, and
 * the report. Owns the topology and config readers too.
 *
 * The model, in SCALE-Sim's terms (docs/accel.md "Memory model"):
 *   - Operands are address matrices: ifmap[p][k] (output pixel p, window index k, -1 outside
 *     the input), filter[k][n] = n*K + k, ofmap[p][n] = p*N + n.
 *   - A dataflow maps two of M (pixels), N (filters), K (window) onto the R x C array and
 *     streams the third (T). Folds run column-fold outer, row-fold inner; each fold is a block
 *     of demand rows (one per cycle) for the three operands: a skewed stream for the moving
 *     operands, the stationary block flipped in the first R rows, the outputs skewed after a
 *     fill gap.
 *   - Each cycle's ifmap and filter requests go to a read buffer, the ofmap results to a write
 *     buffer; the cycle advances by the largest stall the three report.
 *   - USER read buffer: the operand's fetch order (the prefetch matrix) is cut into 100-ish
 *     sets of ceil(size/100) words; half the SRAM is the active window of sets, half the
 *     prefetch. A request not in the active window slides it by the prefetch sets and costs
 *     ceil(prefetch words / bandwidth) + 1 cycles after the previous fetch; a request that
 *     arrives before its fetch completes stalls.
 *   - CALC read buffer: never stalls; misses are collected into sets of floor(size/100) new
 *     words, and every 50 sets the words are "fetched" at the bandwidth that would have been
 *     needed to bring them in since the previous fetch.
 *   - Write buffer: results fill lines of `bandwidth` words; once the active half is full the
 *     drain half is written out one line per cycle; a result that finds no free space waits
 *     for the drain to end.
 * Quirks of SCALE-Sim v2 (commit 22f88b1) kept so that every figure matches: the os ofmap SRAM
 * write count (R + C extra per fold), a drain counting the padding of its last line only, the
 * USER prefetch window advancing whatever address was missed, the output size rounded up. */
#include "accel/layersim.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

void tf_layer_gemm(struct tf_layer *l, const char *name, uint32_t M, uint32_t N, uint32_t K)
{
	memset(l, 0, sizeof *l);
	snprintf(l->name, sizeof l->name, "%s", name ? name : "");
	l->ifmap_h = M;
	l->ifmap_w = K;
	l->filt_h = 1;
	l->filt_w = K;
	l->channels = 1;
	l->filters = N;
	l->stride_h = l->stride_w = 1;
}

/* Output size as SCALE-Sim computes it: ceil((H - Fh + S) / S), one more than a convolution
 * without padding has when (H - Fh) is not a multiple of S; the window positions that reach
 * past the input read nothing (-1 addresses). */
static uint64_t out_h(const struct tf_layer *l)
{
	return ((uint64_t)l->ifmap_h - l->filt_h + 2ull * l->stride_h - 1) / l->stride_h;
}

static uint64_t out_w(const struct tf_layer *l)
{
	return ((uint64_t)l->ifmap_w - l->filt_w + 2ull * l->stride_w - 1) / l->stride_w;
}

int tf_layer_mnk(const struct tf_layer *l, uint64_t *M, uint64_t *N, uint64_t *K)
{
	*M = out_h(l) * out_w(l); /* each side < 2^32: no wrap */
	*N = l->filters;
	if (__builtin_mul_overflow((uint64_t)l->filt_h * l->filt_w, (uint64_t)l->channels, K)) {
		*K = UINT64_MAX;
		return -EOVERFLOW;
	}
	return 0;
}

/* a * b when it is at most `max`, else 0 (every size checked here is at least 1). */
static uint64_t mul_max(uint64_t a, uint64_t b, uint64_t max)
{
	uint64_t r;
	return __builtin_mul_overflow(a, b, &r) || r > max ? 0 : r;
}

void tf_layersim_cfg_init(struct tf_layersim_cfg *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	snprintf(cfg->run_name, sizeof cfg->run_name, "tpuflow");
	cfg->rows = cfg->cols = 128;
	cfg->dataflow = TF_MXU_WS;
	cfg->ifmap_kb = cfg->filter_kb = 1024;
	cfg->ofmap_kb = 512;
	cfg->bandwidth = 10;
}

/* ---- the layer: operand addresses and the dataflow's demand rows ---- */

struct sim {
	const struct tf_layer *l;
	int df;
	int64_t R, C;           /* array */
	int64_t Ew, px, win, N; /* output width, pixels, window, filters */
	int64_t Sr, Sc, T;      /* mapped rows, cols, streamed dimension */
	int64_t RF, CF;         /* row folds, column folds */
	int64_t rows_per_fold;  /* demand rows (cycles) of one fold */
	int wi, wf;             /* widths of the ifmap and filter demand lines */
	/* ifmap addresses split into a pixel part and a window part (computed once) */
	int32_t *p_row, *p_col; /* first input row / column of output pixel p's window */
	int64_t *p_base;        /* its address */
	int32_t *k_row, *k_col; /* row / column offset of window index k */
	int64_t *k_off;         /* its address offset */
};

static void sim_tables(struct sim *s)
{
	const struct tf_layer *l = s->l;
	s->p_row = tf_xmalloc((size_t)s->px * sizeof *s->p_row);
	s->p_col = tf_xmalloc((size_t)s->px * sizeof *s->p_col);
	s->p_base = tf_xmalloc((size_t)s->px * sizeof *s->p_base);
	for (int64_t p = 0; p < s->px; p++) {
		int64_t ir = p / s->Ew * l->stride_h, ic = p % s->Ew * l->stride_w;
		s->p_row[p] = (int32_t)ir;
		s->p_col[p] = (int32_t)ic;
		s->p_base[p] = (ir * (int64_t)l->ifmap_w + ic) * l->channels;
	}
	s->k_row = tf_xmalloc((size_t)s->win * sizeof *s->k_row);
	s->k_col = tf_xmalloc((size_t)s->win * sizeof *s->k_col);
	s->k_off = tf_xmalloc((size_t)s->win * sizeof *s->k_off);
	int64_t fwc = (int64_t)l->filt_w * l->channels;
	for (int64_t k = 0; k < s->win; k++) {
		int64_t cr = k / fwc, rem = k % fwc, cc = rem / l->channels, ch = rem % l->channels;
		s->k_row[k] = (int32_t)cr;
		s->k_col[k] = (int32_t)cc;
		s->k_off[k] = (cr * (int64_t)l->ifmap_w + cc) * l->channels + ch;
	}
}

static void sim_free(struct sim *s)
{
	free(s->p_row);
	free(s->p_col);
	free(s->p_base);
	free(s->k_row);
	free(s->k_col);
	free(s->k_off);
}

/* ifmap address of output pixel p, window index k (relative to the ifmap offset), or -1. */
static inline int64_t ifmap_addr(const struct sim *s, int64_t p, int64_t k)
{
	if (s->p_row[p] + s->k_row[k] >= (int64_t)s->l->ifmap_h ||
	    s->p_col[p] + s->k_col[k] >= (int64_t)s->l->ifmap_w)
		return -1;
	return s->p_base[p] + s->k_off[k];
}

static int64_t filt_addr(const struct sim *s, int64_t k, int64_t n)
{
	return n * s->win + k;
}

static int64_t ofmap_addr(const struct sim *s, int64_t p, int64_t n)
{
	return p * s->N + n;
}

/* Columns c in [0, cap) of a skewed stream whose row r - c - off must lie in [0, T). */
static void skew_cols(int64_t r, int64_t off, int64_t T, int64_t cap, int64_t *c0, int64_t *c1)
{
	int64_t lo = r - off - T + 1, hi = r - off;
	*c0 = lo > 0 ? lo : 0;
	*c1 = hi < cap - 1 ? hi : cap - 1; /* inclusive; empty when c1 < c0 */
}

/* The demand of row r of fold (fr, fc), column order, requests only: the ifmap, filter and
 * ofmap addresses go to in, fi, of and their counts to n[0..2]. */
static void demand(const struct sim *s, int64_t fr, int64_t fc, int64_t r, int64_t *in, int64_t *fi,
                   int64_t *of, int n[3])
{
	const int64_t R = s->R, C = s->C, T = s->T;
	const int64_t ru = s->Sr - fr * R < R ? s->Sr - fr * R : R; /* used rows of the fold */
	const int64_t cu = s->Sc - fc * C < C ? s->Sc - fc * C : C; /* used columns */
	int64_t c0, c1, a;
	int ni = 0, nf = 0, no = 0;
	switch (s->df) {
	case TF_MXU_WS: /* rows <- window, cols <- filters, T = pixels */
		skew_cols(r, R, T, ru, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			if ((a = ifmap_addr(s, r - c - R, fr * R + c)) >= 0)
				in[ni++] = a;
		if (r < R && R - 1 - r < ru)
			for (int64_t c = 0; c < cu; c++)
				fi[nf++] = filt_addr(s, fr * R + (R - 1 - r), fc * C + c);
		skew_cols(r, 2 * R - 1, T, cu, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			of[no++] = ofmap_addr(s, r - c - (2 * R - 1), fc * C + c);
		break;
	case TF_MXU_OS: /* rows <- pixels, cols <- filters, T = window */
		skew_cols(r, 0, T, ru, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			if ((a = ifmap_addr(s, fr * R + c, r - c)) >= 0)
				in[ni++] = a;
		skew_cols(r, 0, T, cu, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			fi[nf++] = filt_addr(s, r - c, fc * C + c);
		skew_cols(r, T - 1, R, cu, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++) {
			int64_t f = r - c - (T - 1);
			if (R - 1 - f < ru)
				of[no++] = ofmap_addr(s, fr * R + (R - 1 - f), fc * C + c);
		}
		break;
	default: /* TF_MXU_IS: rows <- window, cols <- pixels, T = filters */
		if (r < R && R - 1 - r < ru)
			for (int64_t c = 0; c < cu; c++)
				if ((a = ifmap_addr(s, fc * C + c, fr * R + (R - 1 - r))) >= 0)
					in[ni++] = a;
		skew_cols(r, R, T, ru, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			fi[nf++] = filt_addr(s, fr * R + c, r - c - R);
		skew_cols(r, 2 * R - 1, T, cu, &c0, &c1);
		for (int64_t c = c0; c <= c1; c++)
			of[no++] = ofmap_addr(s, fc * C + c, r - c - (2 * R - 1));
		break;
	}
	n[0] = ni, n[1] = nf, n[2] = no;
}

/* ---- fetch orders (USER mode): the prefetch matrices, walked as SCALE-Sim serialises them */

/* Element (row, col) of an operand's prefetch matrix. which: 0 ifmap, 1 filter. */
static int64_t fetch_elem(const struct sim *s, int which, int64_t row, int64_t col)
{
	const int64_t R = s->R, C = s->C, T = s->T, Sr = s->Sr, Sc = s->Sc;
	switch (s->df) {
	case TF_MXU_WS:
		if (which == 0) { /* concat over fr of ifmap[:, fr block] : (RF*T) x R */
			int64_t fr = row / T, t = row % T, k = fr * R + col;
			return k < Sr ? ifmap_addr(s, t, k) : -1;
		} else { /* concat over fc of filter[:, fc block] : (CF*Sr) x C */
			int64_t fc = row / Sr, k = row % Sr, n = fc * C + col;
			return n < Sc ? filt_addr(s, k, n) : -1;
		}
	case TF_MXU_OS:
		if (which == 0) { /* concat over fr of ifmap^T[:, fr block] : (RF*T) x R */
			int64_t fr = row / T, u = row % T, p = fr * R + col;
			return p < Sr ? ifmap_addr(s, p, u) : -1;
		} else { /* concat over fc of filter[:, fc block] : (CF*T) x C */
			int64_t fc = row / T, u = row % T, n = fc * C + col;
			return n < Sc ? filt_addr(s, u, n) : -1;
		}
	default:
		if (which == 0) { /* concat over fc of ifmap^T[:, fc block] : (CF*Sr) x C */
			int64_t fc = row / Sr, k = row % Sr, p = fc * C + col;
			return p < Sc ? ifmap_addr(s, p, k) : -1;
		} else { /* concat over fr of filter[fr block, :]^T : (RF*T) x R */
			int64_t fr = row / T, t = row % T, k = fr * R + col;
			return k < Sr ? filt_addr(s, k, t) : -1;
		}
	}
}

/* Shape of the prefetch matrix and whether SCALE-Sim walks it by anti-diagonals. */
static void fetch_shape(const struct sim *s, int which, int64_t *rows, int64_t *cols, int *diag)
{
	int ws = s->df == TF_MXU_WS, os = s->df == TF_MXU_OS;
	if (which == 0) {
		*rows = ws || os ? s->RF * s->T : s->CF * s->Sr;
		*cols = ws || os ? s->R : s->C;
		*diag = ws || os;
	} else {
		*rows = ws ? s->CF * s->Sr : os ? s->CF * s->T : s->RF * s->T;
		*cols = ws || os ? s->C : s->R;
		*diag = !ws;
	}
}

typedef void (*visit_fn)(void *ctx, int64_t addr);

/* Calls fn for every element of the prefetch matrix in fetch order (-1 included). */
static void fetch_walk(const struct sim *s, int which, visit_fn fn, void *ctx)
{
	int64_t M, N;
	int diag;
	fetch_shape(s, which, &M, &N, &diag);
	if (!diag) {
		for (int64_t r = 0; r < M; r++)
			for (int64_t c = 0; c < N; c++)
				fn(ctx, fetch_elem(s, which, r, c));
		return;
	}
	for (int64_t d = 0; d < M + N; d++) {
		int64_t hi = d < M - 1 ? d : M - 1, lo = d - N + 1 > 0 ? d - N + 1 : 0;
		for (int64_t r = hi; r >= lo; r--)
			fn(ctx, fetch_elem(s, which, r, d - r));
	}
}

/* ---- the ifmap and filter read buffers: USER mode ---- */

struct rdbuf {
	int user;                        /* 1: USER read buffer, 0: CALC estimate */
	int64_t total, active, prefetch; /* words */
	int64_t bw;                      /* words per cycle */
	/* USER: sets of the fetch order, and which sets hold each address (CSR, ascending) */
	int64_t eps, nsets, nact, npre, fetch_rows;
	uint32_t *first; /* per address: start into ids (nwords + 1 entries) */
	uint32_t *ids;   /* set ids */
	int64_t naddr;
	int64_t win_s, win_e; /* active window of sets [s, e), circular */
	int started;
	int64_t last_fetch; /* cycle the last fetch completes */
	/* CALC */
	int64_t items, cur_set, cur_elems; /* words per set, the set being collected, its size */
	int64_t rs, re, ps;                /* active sets [rs, re], first set of the next fetch */
	int64_t last_start, last_end;      /* cycles of the previous fetch window */
	int64_t first_req;                 /* cycle of the first request */
	int first_seen, active_done;
	int32_t *latest; /* per address: 1 + the newest set it was put in, 0: none (calloc'd:
	                    untouched pages cost nothing); NULL when every request is a new
	                    address (ws filter: each weight is loaded once), so none is kept */
	/* both */
	uint64_t accesses;
	int64_t dram_first, dram_last;
	int traced;
};

struct build_ctx {
	struct rdbuf *b;
	int64_t nvalid, total;
	int pass;          /* 0: count, 1: fill */
	int64_t *last_set; /* per address: last set id recorded (dedup) */
	uint32_t *fill;    /* per address: next free slot */
};

static void build_visit(void *ctx, int64_t a)
{
	struct build_ctx *bc = ctx;
	bc->total++;
	if (a < 0)
		return;
	struct rdbuf *b = bc->b;
	int64_t set = bc->nvalid / b->eps;
	bc->nvalid++;
	if (bc->last_set[a] == set)
		return;
	bc->last_set[a] = set;
	if (bc->pass == 0)
		b->first[a + 1]++;
	else
		b->ids[bc->fill[a]++] = (uint32_t)set;
}

static int rdbuf_user_init(struct rdbuf *b, const struct sim *s, int which, int64_t naddr)
{
	struct build_ctx bc = {.b = b};
	b->naddr = naddr;
	b->eps = (b->total + 99) / 100;
	b->first = tf_xcalloc((size_t)naddr + 1, sizeof *b->first);
	bc.last_set = tf_xmalloc((size_t)naddr * sizeof *bc.last_set);
	for (int64_t i = 0; i < naddr; i++)
		bc.last_set[i] = -1;
	fetch_walk(s, which, build_visit, &bc);
	int64_t nvalid = bc.nvalid, total = bc.total;
	for (int64_t i = 0; i < naddr; i++)
		b->first[i + 1] += b->first[i];
	if (b->first[naddr] > UINT32_MAX - 1) {
		free(bc.last_set);
		return -ENOMEM;
	}
	b->ids = tf_xmalloc(((size_t)b->first[naddr] + 1) * sizeof *b->ids);
	bc.fill = tf_xmalloc((size_t)naddr * sizeof *bc.fill);
	for (int64_t i = 0; i < naddr; i++) {
		bc.fill[i] = b->first[i];
		bc.last_set[i] = -1;
	}
	bc.pass = 1;
	bc.nvalid = bc.total = 0;
	fetch_walk(s, which, build_visit, &bc);
	free(bc.fill);
	free(bc.last_set);
	b->nsets = nvalid / b->eps + 1; /* the last set may be empty */
	int64_t max_act = (b->active + b->eps - 1) / b->eps;
	int64_t max_pre = (b->prefetch + b->eps - 1) / b->eps;
	b->nact = b->nsets > max_act ? max_act : b->nsets;
	int64_t left = b->nsets - b->nact;
	b->npre = left > max_pre ? max_pre : left;
	b->fetch_rows = (total + b->bw - 1) / b->bw;
	return 0;
}

/* Whether an address is in a set of the active window. */
static int user_hit(const struct rdbuf *b, int64_t a)
{
	const uint32_t *lo = b->ids + b->first[a], *hi = b->ids + b->first[a + 1];
	if (lo == hi)
		return 0;
	int64_t s = b->win_s, e = b->win_e;
	if (s < e) {
		/* the first id >= s, then whether it is < e */
		while (lo < hi) {
			const uint32_t *mid = lo + (hi - lo) / 2;
			if ((int64_t)*mid < s)
				lo = mid + 1;
			else
				hi = mid;
		}
		return lo < b->ids + b->first[a + 1] && (int64_t)*lo < e;
	}
	return (int64_t)hi[-1] >= s || (int64_t)lo[0] < e;
}

static void user_prefetch_active(struct rdbuf *b, int64_t start)
{
	int64_t n = (b->active + b->bw - 1) / b->bw;
	if (n > b->fetch_rows)
		n = b->fetch_rows;
	b->accesses += (uint64_t)(n * b->bw);
	b->dram_first = start - n;
	b->dram_last = b->last_fetch = start - 1;
	b->traced = 1;
	b->win_s = 0;
	b->win_e = b->nact;
	b->started = 1;
}

static void user_new_prefetch(struct rdbuf *b)
{
	b->win_s = (b->win_s + b->npre) % b->nsets;
	b->win_e = (b->win_s + b->nact) % b->nsets;
	int64_t n = (b->prefetch + b->bw - 1) / b->bw;
	b->accesses += (uint64_t)(n * b->bw);
	b->last_fetch += n + 1;
	b->dram_last = b->last_fetch;
}

/* ---- CALC-mode read buffer (bandwidth estimate) ---- */

/* unique: no address is requested twice (the buffer then keeps no per-address table) */
static void calc_init(struct rdbuf *b, int64_t naddr, int unique)
{
	b->naddr = naddr;
	b->items = b->total / 100;
	b->rs = 0;
	b->re = 49; /* 50 active sets of 100 */
	b->last_start = -2;
	b->last_end = -1;
	b->latest = unique ? NULL : tf_xcalloc((size_t)naddr, sizeof *b->latest);
}

/* Records the fetch of `words` over cycles [last_start, last_end] (responses one cycle later). */
static void calc_fetch(struct rdbuf *b, int64_t words)
{
	b->accesses += (uint64_t)words;
	if (!b->traced) {
		b->dram_first = b->last_start + 1;
		b->traced = 1;
	}
	b->dram_last = b->last_end + 1;
}

static void calc_access(struct rdbuf *b, int64_t cycle, int64_t a)
{
	if (b->latest) { /* else a new address: a miss */
		int64_t lt = (int64_t)b->latest[a] - 1;
		if (lt >= b->rs && lt < b->cur_set)
			return; /* a hit in the active sets */
		if (lt == b->cur_set)
			return; /* already in the set being collected */
		b->latest[a] = (int32_t)(b->cur_set + 1);
	}
	if (++b->cur_elems < b->items)
		return;
	b->cur_elems = 0;
	b->cur_set++;
	if (b->cur_set != b->re + 1)
		return;
	if (!b->active_done) {
		b->last_end = b->first_req - 2;
		int64_t need = (50 * b->items + b->bw - 1) / b->bw;
		b->last_start = b->last_end - need + 1;
		calc_fetch(b, 50 * b->items);
		b->ps = b->re + 1;
		b->active_done = 1;
	} else {
		calc_fetch(b, 50 * b->items);
		b->ps += 50;
	}
	b->rs += 50;
	b->re += 50;
	b->last_start = b->last_end + 1;
	b->last_end = cycle;
}

static void calc_finish(struct rdbuf *b)
{
	/* the set being collected counts if it has words; its size is what it holds */
	int64_t partial = b->cur_elems;
	if (!partial)
		b->cur_set--;
	int64_t full_sets_words;
	if (!b->active_done) {
		int64_t nsets = b->cur_set + 1;
		b->last_end = -2;
		int64_t need = (nsets * b->items + b->bw - 1) / b->bw;
		b->last_start = b->last_end - need + 1;
		full_sets_words = (partial ? nsets - 1 : nsets) * b->items;
	} else {
		int64_t nsets = b->cur_set - b->ps + 1;
		full_sets_words = (partial ? nsets - 1 : nsets) * b->items;
	}
	calc_fetch(b, full_sets_words + partial);
}

/* ---- one read buffer, either mode ---- */

/* Services one cycle's requests (n addresses) at `cycle`; returns the cycle they are served
 * (cycle + 1 + stalls). */
static int64_t rd_service(struct rdbuf *b, const int64_t *req, int n, int64_t cycle)
{
	if (!b->user) {
		if (n && !b->first_seen) {
			b->first_req = cycle;
			b->first_seen = 1;
		}
		for (int i = 0; i < n; i++)
			calc_access(b, cycle, req[i]);
		return cycle + 1;
	}
	if (!b->started)
		user_prefetch_active(b, cycle);
	int64_t offset = 1;
	for (int i = 0; i < n; i++) {
		if (b->first[req[i]] == b->first[req[i] + 1])
			continue; /* not in the fetch order (cannot happen: the same operand) */
		while (!user_hit(b, req[i])) {
			user_new_prefetch(b);
			int64_t late = b->last_fetch - (cycle + offset);
			if (late > 0)
				offset += late;
		}
	}
	return cycle + offset;
}

static void rd_free(struct rdbuf *b)
{
	free(b->first);
	free(b->ids);
	free(b->latest);
}

/* ---- the ofmap write buffer ---- */

struct wrbuf {
	int64_t total, active, drain, bw;
	int64_t free_space;
	uint32_t *lines; /* valid words of each committed line */
	size_t nlines, cap;
	int64_t line_idx;   /* words in the line being filled */
	size_t drain_start; /* first line not yet drained */
	int64_t drain_end;  /* cycle the current drain ends */
	uint64_t accesses;
	int64_t dram_first, dram_last;
	int traced;
};

static void wr_commit(struct wrbuf *w, int64_t count)
{
	if (w->nlines == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 1024;
		w->lines = tf_xrealloc(w->lines, w->cap * sizeof *w->lines);
	}
	w->lines[w->nlines++] = (uint32_t)count;
}

static void wr_store(struct wrbuf *w)
{
	w->line_idx++;
	w->free_space--;
	if (w->line_idx == w->bw) {
		wr_commit(w, w->bw);
		w->line_idx = 0;
	}
}

static void wr_force(struct wrbuf *w)
{
	if (w->line_idx) {
		wr_commit(w, w->line_idx);
		w->line_idx = 0;
	}
}

/* Drains up to the drain half's lines from `start`; returns the cycle the last one is written. */
static int64_t wr_drain(struct wrbuf *w, int64_t start)
{
	size_t want = (size_t)((w->drain + w->bw - 1) / w->bw);
	size_t end = w->drain_start + want < w->nlines ? w->drain_start + want : w->nlines;
	size_t n = end - w->drain_start;
	if (n == 0)
		return start - 1; /* nothing to write */
	/* SCALE-Sim counts whole lines but the padding of the last one only */
	int64_t data = (int64_t)n * w->bw - (w->bw - (int64_t)w->lines[end - 1]);
	w->accesses += (uint64_t)data;
	if (!w->traced) {
		w->dram_first = start;
		w->traced = 1;
	}
	w->dram_last = start + (int64_t)n - 1;
	w->free_space += data;
	w->drain_start = end;
	return start + (int64_t)n - 1;
}

static int64_t wr_service(struct wrbuf *w, int n, int64_t cycle)
{
	int64_t cur = cycle;
	for (int i = 0; i < n; i++) {
		wr_store(w);
		if (cur < w->drain_end) {
			if (w->free_space <= 0)
				cur = w->drain_end;
		} else if (w->free_space < w->active) {
			wr_force(w);
			w->drain_end = wr_drain(w, cur);
		}
	}
	return cur;
}

static void wr_empty_all(struct wrbuf *w, int64_t cycle)
{
	wr_force(w);
	while (w->drain_start < w->nlines) {
		w->drain_end = wr_drain(w, cycle);
		cycle = w->drain_end + 1;
	}
}

/* ---- the run ---- */

static void mem_bw(struct tf_layersim_mem *m, uint64_t total)
{
	m->sram_bw = total ? (double)m->sram_accesses / (double)total : 0.0;
	int64_t span = m->dram_stop - m->dram_start + 1;
	m->dram_bw = span ? (double)m->dram_accesses / (double)span : 0.0;
}

int tf_layersim_run(const struct tf_layersim_cfg *cfg, const struct tf_layer *l,
                    struct tf_layersim_report *out, char *err, size_t errlen)
{
	const struct tf_layer *L = l;
	if (cfg->rows < 1 || cfg->cols < 1 || cfg->rows > 65536 || cfg->cols > 65536) {
		tf_errf(err, errlen, "array %dx%d: both sides must be 1..65536", cfg->rows,
		        cfg->cols);
		return -EINVAL;
	}
	if (cfg->dataflow != TF_MXU_WS && cfg->dataflow != TF_MXU_OS &&
	    cfg->dataflow != TF_MXU_IS) {
		tf_errf(err, errlen, "unknown dataflow %d: use ws, os or is", cfg->dataflow);
		return -EINVAL;
	}
	if (cfg->ifmap_kb < 1 || cfg->filter_kb < 1 || cfg->ofmap_kb < 1 ||
	    cfg->ifmap_kb > (1u << 22) || cfg->filter_kb > (1u << 22) ||
	    cfg->ofmap_kb > (1u << 22)) {
		tf_errf(err, errlen, "SRAM sizes must be 1..4194304 kB (got %u, %u, %u)",
		        cfg->ifmap_kb, cfg->filter_kb, cfg->ofmap_kb);
		return -EINVAL;
	}
	if (cfg->user_bandwidth && (cfg->bandwidth < 1 || cfg->bandwidth > (1u << 20))) {
		tf_errf(err, errlen, "bandwidth %u words/cycle: must be 1..1048576",
		        cfg->bandwidth);
		return -EINVAL;
	}
	if (!L->ifmap_h || !L->ifmap_w || !L->filt_h || !L->filt_w || !L->channels || !L->filters ||
	    !L->stride_h || !L->stride_w) {
		tf_errf(err, errlen, "layer '%s': every dimension and stride must be at least 1",
		        L->name);
		return -EINVAL;
	}
	if (L->filt_h > L->ifmap_h || L->filt_w > L->ifmap_w) {
		tf_errf(err, errlen,
		        "layer '%s': the filter (%ux%u) is larger than the input (%ux%u)", L->name,
		        L->filt_h, L->filt_w, L->ifmap_h, L->ifmap_w);
		return -EINVAL;
	}
	struct sim s = {.l = L, .df = cfg->dataflow, .R = cfg->rows, .C = cfg->cols};
	uint64_t M, N, K;
	int wide = tf_layer_mnk(L, &M, &N, &K);
	s.Ew = (int64_t)out_w(L);
	s.px = (int64_t)M;
	s.N = (int64_t)N;
	s.win = (int64_t)K;
	/* every product below is taken from the file's sizes: checked, never wrapped */
	int64_t in_words = (int64_t)mul_max((uint64_t)L->ifmap_h * L->ifmap_w, L->channels,
	                                    1ull << 31);
	if (wide || !mul_max(M, K, 1ull << 34) || !mul_max(N, K, 1ull << 31) || !in_words ||
	    !mul_max(M, N, 1ull << 40)) {
		tf_errf(err, errlen, "layer '%s' is too large to simulate (%llu x %llu x %llu)",
		        L->name, (unsigned long long)M, (unsigned long long)N,
		        (unsigned long long)K);
		return -ENOMEM;
	}
	switch (s.df) {
	case TF_MXU_WS:
		s.Sr = s.win, s.Sc = s.N, s.T = s.px;
		break;
	case TF_MXU_OS:
		s.Sr = s.px, s.Sc = s.N, s.T = s.win;
		break;
	default:
		s.Sr = s.win, s.Sc = s.px, s.T = s.N;
		break;
	}
	s.RF = (s.Sr + s.R - 1) / s.R;
	s.CF = (s.Sc + s.C - 1) / s.C;
	s.rows_per_fold = s.df == TF_MXU_OS ? s.R + s.C + s.T - 2 : 2 * s.R + s.C + s.T - 2;
	s.wi = s.df == TF_MXU_IS ? (int)s.C : (int)s.R;
	s.wf = s.df == TF_MXU_IS ? (int)s.R : (int)s.C;
	/* The simulation visits every cycle: at most 2^30 of them (the analytical model,
	 * `accel cycles --m --k --n`, takes any size), and every count it reports fits. */
	uint64_t folds = mul_max((uint64_t)s.RF, (uint64_t)s.CF, 1ull << 30);
	uint64_t cycles = mul_max(folds, (uint64_t)s.rows_per_fold, 1ull << 30);
	if (!cycles || !mul_max(cycles, (uint64_t)(s.R > s.C ? s.R : s.C) * 4, 1ull << 62) ||
	    !mul_max((uint64_t)s.T * (uint64_t)(s.RF > s.CF ? s.RF : s.CF),
	             (uint64_t)(s.Sr > s.Sc ? s.Sr : s.Sc), 1ull << 62)) {
		tf_errf(err, errlen,
		        "layer '%s' (%llu x %llu x %llu) on %dx%d takes more than 2^30 cycles to "
		        "simulate: use the cycle model for it (accel cycles --m --k --n)",
		        L->name, (unsigned long long)M, (unsigned long long)N, (unsigned long long)K,
		        cfg->rows, cfg->cols);
		return -E2BIG;
	}
	sim_tables(&s);

	struct tf_layersim_report r;
	memset(&r, 0, sizeof r);
	r.folds = folds;
	r.compute_cycles = cycles;
	r.wdb_cycles = (uint64_t)s.R + r.folds * (uint64_t)(s.R + s.C + s.T - 2);

	/* Per-fold mapping efficiency and compute utilization, summed in fold order. */
	double me = 0, cu = 0;
	int64_t fold_cycles = s.df == TF_MXU_OS ? s.T + s.R + s.C - 2 : 2 * s.R + 2 * s.C + s.T - 3;
	for (int64_t fc = 0; fc < s.CF; fc++) {
		for (int64_t fr = 0; fr < s.RF; fr++) {
			int64_t ru = s.Sr - fr * s.R < s.R ? s.Sr - fr * s.R : s.R;
			int64_t cuse = s.Sc - fc * s.C < s.C ? s.Sc - fc * s.C : s.C;
			me += (double)(ru * cuse) / (double)(s.R * s.C);
			cu += (double)(ru * cuse * s.T) / (double)(s.R * s.C * fold_cycles);
		}
	}
	r.mapping_efficiency = me / (double)r.folds * 100;
	r.compute_util = cu / (double)r.folds * 100;
	/* SRAM accesses as SCALE-Sim counts them */
	switch (s.df) {
	case TF_MXU_WS:
		r.ifmap.sram_accesses = (uint64_t)(s.T * s.Sr * s.CF);
		r.filter.sram_accesses = (uint64_t)(s.Sr * s.Sc);
		r.ofmap.sram_accesses = (uint64_t)(s.T * s.Sc * s.RF);
		break;
	case TF_MXU_OS:
		r.ifmap.sram_accesses = (uint64_t)(s.T * s.Sr * s.CF);
		r.filter.sram_accesses = (uint64_t)(s.T * s.Sc * s.RF);
		r.ofmap.sram_accesses = (uint64_t)(s.Sr * s.Sc + r.folds * (uint64_t)(s.R + s.C));
		break;
	default:
		r.ifmap.sram_accesses = (uint64_t)(s.Sr * s.Sc);
		r.filter.sram_accesses = (uint64_t)(s.T * s.Sr * s.CF);
		r.ofmap.sram_accesses = (uint64_t)(s.T * s.Sc * s.RF);
		break;
	}

	struct rdbuf ib = {0}, fb = {0};
	struct wrbuf wb = {0};
	struct rdbuf *bufs[2] = {&ib, &fb};
	const uint32_t kbs[2] = {cfg->ifmap_kb, cfg->filter_kb};
	const int64_t naddr[2] = {in_words, s.win * s.N};
	int rc = 0;
	for (int i = 0; i < 2; i++) {
		struct rdbuf *b = bufs[i];
		b->user = cfg->user_bandwidth;
		b->total = (int64_t)kbs[i] * 1024;
		b->active = (b->total + 1) / 2; /* ceil(total * 0.5) */
		b->prefetch = b->total - b->active;
		b->bw = cfg->user_bandwidth ? cfg->bandwidth : 10;
		if (b->user)
			rc = rdbuf_user_init(b, &s, i, naddr[i]);
		else
			calc_init(b, naddr[i], i == 1 && s.df == TF_MXU_WS);
		if (rc) {
			tf_errf(err, errlen, "layer '%s' is too large to index", L->name);
			goto out;
		}
	}
	wb.total = (int64_t)cfg->ofmap_kb * 1024;
	wb.active = (wb.total + 1) / 2;
	wb.drain = wb.total - wb.active;
	wb.bw = cfg->user_bandwidth ? (int64_t)cfg->bandwidth : (int64_t)cfg->cols;
	wb.free_space = wb.total;

	int64_t *lin = tf_xmalloc((size_t)(s.wi + s.wf + s.C) * sizeof *lin);
	int64_t *lfi = lin + s.wi, *lof = lfi + s.wf;
	int64_t stall = 0, row = 0, last_out = 0;
	int seen[3] = {0, 0, 0};
	struct tf_layersim_mem *mem[3] = {&r.ifmap, &r.filter, &r.ofmap};
	for (int64_t fc = 0; fc < s.CF; fc++) {
		for (int64_t fr = 0; fr < s.RF; fr++) {
			for (int64_t rr = 0; rr < s.rows_per_fold; rr++, row++) {
				int n[3];
				demand(&s, fr, fc, rr, lin, lfi, lof, n);
				int64_t cycle = row + stall;
				int64_t done[3] = {rd_service(&ib, lin, n[0], cycle),
				                   rd_service(&fb, lfi, n[1], cycle),
				                   wr_service(&wb, n[2], cycle)};
				int64_t st = done[0] - cycle - 1;
				if (done[1] - cycle - 1 > st)
					st = done[1] - cycle - 1;
				if (done[2] - cycle > st)
					st = done[2] - cycle;
				stall += st;
				last_out = done[2];
				/* first and last cycle each SRAM is accessed */
				for (int o = 0; o < 3; o++) {
					if (!n[o])
						continue;
					if (!seen[o])
						mem[o]->sram_start = done[o];
					seen[o] = 1;
					mem[o]->sram_stop = done[o];
				}
			}
		}
	}
	free(lin);
	if (!cfg->user_bandwidth) {
		calc_finish(&ib);
		calc_finish(&fb);
	}
	wr_empty_all(&wb, last_out);
	r.total_cycles = (uint64_t)last_out;
	r.stall_cycles = (uint64_t)stall;
	r.overall_util = r.total_cycles ? (double)M * (double)N * (double)K * 100 /
	                                      ((double)r.total_cycles * (double)(s.R * s.C))
	                                : 0.0;
	r.ifmap.dram_start = ib.dram_first, r.ifmap.dram_stop = ib.dram_last;
	r.ifmap.dram_accesses = ib.accesses;
	r.filter.dram_start = fb.dram_first, r.filter.dram_stop = fb.dram_last;
	r.filter.dram_accesses = fb.accesses;
	r.ofmap.dram_start = wb.dram_first, r.ofmap.dram_stop = wb.dram_last;
	r.ofmap.dram_accesses = wb.accesses;
	mem_bw(&r.ifmap, r.total_cycles);
	mem_bw(&r.filter, r.total_cycles);
	mem_bw(&r.ofmap, r.total_cycles);
	*out = r;
out:
	sim_free(&s);
	rd_free(&ib);
	rd_free(&fb);
	free(wb.lines);
	return rc;
}

/* ---- readers ---- */

/* Splits a CSV line in place at commas; trims spaces. Returns the field count (<= max). */
static int split_csv(char *line, char **f, int max)
{
	int n = 0;
	char *p = line;
	for (;;) {
		char *comma = strchr(p, ',');
		if (comma)
			*comma = '\0';
		if (n < max) {
			while (isspace((unsigned char)*p))
				p++;
			char *e = p + strlen(p);
			while (e > p && isspace((unsigned char)e[-1]))
				*--e = '\0';
			f[n] = p;
		}
		n++;
		if (!comma)
			break;
		p = comma + 1;
	}
	return n;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	if (!*s || *s == '-')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int tf_layersim_read_topology(const char *path, int gemm, struct tf_layer **layers, size_t *n,
                              char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	if (!fp) {
		int e = errno;
		tf_errf(err, errlen, "cannot open topology '%s': %s", path, strerror(e));
		return -e;
	}
	char line[4096];
	struct tf_layer *v = NULL;
	size_t nv = 0, cap = 0;
	int rc = 0, lineno = 0;
	while (fgets(line, sizeof line, fp)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(fp)) {
			tf_errf(err, errlen, "%s:%d: line longer than %zu bytes", path, lineno,
			        sizeof line - 1);
			rc = -EINVAL;
			break;
		}
		char *f[16];
		char copy[4096];
		snprintf(copy, sizeof copy, "%s", line);
		int nf = split_csv(copy, f, 16);
		if (lineno == 1) { /* the header: tells the formats apart */
			if (!gemm && nf >= 4 && nf <= 6 && !strcasecmp(f[1], "M") &&
			    !strcasecmp(f[2], "N") && !strcasecmp(f[3], "K"))
				gemm = 1;
			continue;
		}
		int blank = 1;
		for (char *p = line; *p; p++)
			blank &= isspace((unsigned char)*p) != 0;
		if (blank)
			continue;
		/* As SCALE-Sim: the field after the last comma is dropped. */
		int used = nf - 1 < 16 ? nf - 1 : 16;
		struct tf_layer l;
		memset(&l, 0, sizeof l);
		uint32_t x[8];
		int need = gemm ? 3 : 7;
		if (used < need + 1) {
			tf_errf(err, errlen,
			        "%s:%d: expected %s and a trailing comma, found %d field%s", path,
			        lineno,
			        gemm ? "'name, M, N, K'"
			             : "'name, H, W, Fh, Fw, channels, filters, stride'",
			        nf, nf == 1 ? "" : "s");
			rc = -EINVAL;
			break;
		}
		int bad = 0;
		int count = gemm ? 3 : (used - 1 >= 8 ? 8 : 7);
		for (int i = 0; i < count && !bad; i++)
			bad = parse_u32(f[1 + i], &x[i]) != 0;
		if (bad) {
			tf_errf(err, errlen, "%s:%d: every size must be a non-negative integer",
			        path, lineno);
			rc = -EINVAL;
			break;
		}
		if (gemm) {
			tf_layer_gemm(&l, f[0], x[0], x[1], x[2]);
		} else {
			snprintf(l.name, sizeof l.name, "%s", f[0]);
			l.ifmap_h = x[0], l.ifmap_w = x[1], l.filt_h = x[2], l.filt_w = x[3];
			l.channels = x[4], l.filters = x[5], l.stride_h = x[6];
			l.stride_w = count == 8 ? x[7] : x[6];
		}
		if (l.filt_h > l.ifmap_h || l.filt_w > l.ifmap_w || !l.ifmap_h || !l.ifmap_w ||
		    !l.filt_h || !l.filt_w || !l.channels || !l.filters || !l.stride_h ||
		    !l.stride_w) {
			tf_errf(err, errlen,
			        "%s:%d: layer '%s': sizes must be at least 1 and the filter no "
			        "larger than the input",
			        path, lineno, l.name);
			rc = -EINVAL;
			break;
		}
		/* depthwise ("DP" in the name): one layer per channel, as SCALE-Sim */
		uint32_t copies = !gemm && strstr(l.name, "DP") ? l.channels : 1;
		if (copies > 1u << 16 || nv + copies > 1u << 20) {
			tf_errf(err, errlen, "%s:%d: too many layers", path, lineno);
			rc = -EINVAL;
			break;
		}
		for (uint32_t c = 0; c < copies; c++) {
			if (nv == cap) {
				cap = cap ? 2 * cap : 16;
				v = tf_xrealloc(v, cap * sizeof *v);
			}
			v[nv] = l;
			if (copies > 1) {
				char base[64];
				snprintf(base, sizeof base, "%s", l.name);
				snprintf(v[nv].name, sizeof v[nv].name, "%.40sChannel_%u", base, c);
				v[nv].channels = 1;
			}
			nv++;
		}
	}
	fclose(fp);
	if (!rc && nv == 0) {
		tf_errf(err, errlen, "%s: no layers (a header line, then one layer per line)",
		        path);
		rc = -EINVAL;
	}
	if (rc) {
		free(v);
		return rc;
	}
	*layers = v;
	*n = nv;
	return 0;
}

int tf_layersim_read_cfg(const char *path, struct tf_layersim_cfg *cfg, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	if (!fp) {
		int e = errno;
		tf_errf(err, errlen, "cannot open config '%s': %s", path, strerror(e));
		return -e;
	}
	struct tf_layersim_cfg c;
	tf_layersim_cfg_init(&c);
	char line[1024], section[64] = "";
	int lineno = 0, rc = 0, have_mode = 0, have_bw = 0;
	while (fgets(line, sizeof line, fp)) {
		lineno++;
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		char *e = p + strlen(p);
		while (e > p && isspace((unsigned char)e[-1]))
			*--e = '\0';
		if (!*p || *p == '#' || *p == ';')
			continue;
		if (*p == '[') {
			char *close = strchr(p, ']');
			if (!close) {
				tf_errf(err, errlen, "%s:%d: unterminated section header", path,
				        lineno);
				rc = -EINVAL;
				break;
			}
			*close = '\0';
			snprintf(section, sizeof section, "%s", p + 1);
			continue;
		}
		char *sep = strpbrk(p, ":=");
		if (!sep) {
			tf_errf(err, errlen, "%s:%d: expected 'key: value' or 'key = value'", path,
			        lineno);
			rc = -EINVAL;
			break;
		}
		*sep = '\0';
		char *key = p, *val = sep + 1;
		for (char *k = sep; k > key && isspace((unsigned char)k[-1]);)
			*--k = '\0';
		while (isspace((unsigned char)*val))
			val++;
		uint32_t u = 0;
		int numeric = parse_u32(val, &u) == 0;
		struct {
			const char *name;
			uint32_t *dst;
		} nums[] = {{"ifmapsramszkb", &c.ifmap_kb},
		            {"filtersramszkb", &c.filter_kb},
		            {"ofmapsramszkb", &c.ofmap_kb}};
		int done = 0;
		if (!strcasecmp(key, "run_name")) {
			snprintf(c.run_name, sizeof c.run_name, "%s", val);
			done = 1;
		} else if (!strcasecmp(key, "ArrayHeight") || !strcasecmp(key, "ArrayWidth")) {
			if (!numeric || u < 1 || u > 65536) {
				tf_errf(err, errlen, "%s:%d: %s must be 1..65536, not '%s'", path,
				        lineno, key, val);
				rc = -EINVAL;
				break;
			}
			*(!strcasecmp(key, "ArrayHeight") ? &c.rows : &c.cols) = (int)u;
			done = 1;
		} else if (!strcasecmp(key, "Dataflow")) {
			if (!strcasecmp(val, "ws"))
				c.dataflow = TF_MXU_WS;
			else if (!strcasecmp(val, "os"))
				c.dataflow = TF_MXU_OS;
			else if (!strcasecmp(val, "is"))
				c.dataflow = TF_MXU_IS;
			else {
				tf_errf(err, errlen, "%s:%d: Dataflow '%s' must be ws, os or is",
				        path, lineno, val);
				rc = -EINVAL;
				break;
			}
			done = 1;
		} else if (!strcasecmp(key, "InterfaceBandwidth")) {
			if (!strcmp(val, "USER"))
				c.user_bandwidth = 1;
			else if (!strcmp(val, "CALC"))
				c.user_bandwidth = 0;
			else {
				tf_errf(err, errlen,
				        "%s:%d: InterfaceBandwidth '%s' must be USER or CALC", path,
				        lineno, val);
				rc = -EINVAL;
				break;
			}
			have_mode = 1;
			done = 1;
		} else if (!strcasecmp(key, "Bandwidth")) {
			/* a list "a,b,c" is allowed; SCALE-Sim uses its first value */
			char first[32];
			snprintf(first, sizeof first, "%.*s", (int)strcspn(val, ", "), val);
			if (parse_u32(first, &u) || u < 1) {
				tf_errf(err, errlen,
				        "%s:%d: Bandwidth must be a positive number of words per "
				        "cycle, not '%s'",
				        path, lineno, val);
				rc = -EINVAL;
				break;
			}
			c.bandwidth = u;
			have_bw = 1;
			done = 1;
		}
		for (size_t i = 0; i < sizeof nums / sizeof nums[0] && !done; i++) {
			if (strcasecmp(key, nums[i].name))
				continue;
			if (!numeric || u < 1 || u > (1u << 22)) {
				tf_errf(err, errlen, "%s:%d: %s must be 1..4194304 (kB), not '%s'",
				        path, lineno, key, val);
				rc = -EINVAL;
				break;
			}
			*nums[i].dst = u;
			done = 1;
		}
		if (rc)
			break;
		/* other keys (offsets, MemoryBanks, TopologyCsvLoc...) do not change figures */
	}
	fclose(fp);
	if (!rc && !have_mode) {
		tf_errf(err, errlen,
		        "%s: [run_presets] InterfaceBandwidth (USER or CALC) is missing", path);
		rc = -EINVAL;
	}
	if (!rc && c.user_bandwidth && !have_bw) {
		tf_errf(err, errlen, "%s: USER bandwidth mode needs Bandwidth (words per cycle)",
		        path);
		rc = -EINVAL;
	}
	if (!rc)
		*cfg = c;
	return rc;
}
