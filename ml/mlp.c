/* mlp.c — MLP forward/backward through the MXU contract (see mlp.h). */
#include "ml/mlp.h"

#include "common/common.h"
#include "ml/rng.h"

#include <errno.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

int tf_mlp_init(struct tf_mlp *m, size_t inputs, const size_t *hidden, int nhidden, int classes,
                int binary)
{
	if (nhidden < 0 || nhidden + 1 > TF_MLP_MAX_LAYERS || inputs == 0 || classes < 2 ||
	    (binary && classes != 2))
		return -EINVAL;
	for (int i = 0; i < nhidden; i++)
		if (hidden[i] == 0)
			return -EINVAL;
	/* sizes may come from a file (a bundle's signature): bound them before any product */
	if (inputs > TF_MLP_MAX_WIDTH || (size_t)classes > TF_MLP_MAX_WIDTH)
		return -E2BIG;
	for (int i = 0; i < nhidden; i++)
		if (hidden[i] > TF_MLP_MAX_WIDTH)
			return -E2BIG;
	memset(m, 0, sizeof *m);
	m->nlayers = nhidden + 1;
	m->classes = classes;
	m->binary = binary;
	m->size[0] = inputs;
	for (int i = 0; i < nhidden; i++)
		m->size[i + 1] = hidden[i];
	m->size[m->nlayers] = binary ? 1 : (size_t)classes;
	size_t off = 0;
	for (int l = 0; l < m->nlayers; l++) {
		m->w_off[l] = off;
		off += m->size[l] * m->size[l + 1]; /* each term <= 2^32: no wrap in 16 layers */
		m->b_off[l] = off;
		off += m->size[l + 1];
	}
	if (off > TF_MLP_MAX_PARAMS)
		return -E2BIG;
	m->nparams = off;
	m->params = calloc(off, sizeof(float));
	return m->params ? 0 : -ENOMEM;
}

void tf_mlp_release(struct tf_mlp *m)
{
	if (!m)
		return;
	free(m->params);
	m->params = NULL;
}

void tf_mlp_init_params(struct tf_mlp *m, uint64_t seed)
{
	uint64_t s = tf_rng_seed(seed, 0x1417, 0);
	memset(m->params, 0, m->nparams * sizeof(float));
	for (int l = 0; l < m->nlayers; l++) {
		double sd = sqrt(2.0 / (double)m->size[l]);
		float *w = m->params + m->w_off[l];
		for (size_t i = 0; i < m->size[l] * m->size[l + 1]; i++)
			w[i] = (float)(tf_rng_normal(&s) * sd);
	}
}

size_t tf_mlp_outputs(const struct tf_mlp *m)
{
	return m->size[m->nlayers];
}

/* The activations; with `train`, also the gradient buffers of a training pass. */
static void work_init(struct tf_mlp_work *w, const struct tf_mlp *m, size_t max_rows, int train)
{
	memset(w, 0, sizeof *w);
	w->max_rows = max_rows;
	for (int l = 1; l <= m->nlayers; l++)
		w->act[l] = tf_xmalloc(max_rows * m->size[l] * sizeof(float) + 64);
	if (!train)
		return;
	for (int l = 0; l < m->nlayers; l++)
		w->dz[l] = tf_xmalloc(max_rows * m->size[l + 1] * sizeof(float) + 64);
	w->grad = tf_xcalloc(m->nparams, sizeof(float));
}

void tf_mlp_work_init(struct tf_mlp_work *w, const struct tf_mlp *m, size_t max_rows)
{
	work_init(w, m, max_rows, 1);
}

void tf_mlp_work_init_forward(struct tf_mlp_work *w, const struct tf_mlp *m, size_t max_rows)
{
	work_init(w, m, max_rows, 0);
}

void tf_mlp_work_release(struct tf_mlp_work *w)
{
	if (!w)
		return;
	for (int l = 0; l <= TF_MLP_MAX_LAYERS; l++)
		free(w->act[l]);
	for (int l = 0; l < TF_MLP_MAX_LAYERS; l++) {
		free(w->dz[l]);
		tf_mxu_wpack_free(w->dzpack[l]);
	}
	free(w->grad);
	memset(w, 0, sizeof *w);
}

/* Elementwise helpers. SSE2 (the x86-64 baseline) does four lanes at a time with exactly the
 * scalar operations, so results are the same on every path and machine:
 *   relu(v) = v when v > 0 or v is NaN (a NaN reaches the loss and stops training), else +0. */
static inline float relu1(float v)
{
	return v > 0.0f || v != v ? v : 0.0f;
}

/* r[j] = relu(r[j] + b[j]) */
static void bias_relu(float *r, const float *b, size_t N)
{
	size_t j = 0;
#ifdef __SSE2__
	const __m128 z = _mm_setzero_ps();
	for (; j + 4 <= N; j += 4) {
		__m128 v = _mm_add_ps(_mm_loadu_ps(r + j), _mm_loadu_ps(b + j));
		__m128 keep = _mm_or_ps(_mm_cmpgt_ps(v, z), _mm_cmpunord_ps(v, v));
		_mm_storeu_ps(r + j, _mm_and_ps(keep, v));
	}
#endif
	for (; j < N; j++)
		r[j] = relu1(r[j] + b[j]);
}

/* r[j] += a[j] */
static void add_rows(float *r, const float *a, size_t N)
{
	size_t j = 0;
#ifdef __SSE2__
	for (; j + 4 <= N; j += 4)
		_mm_storeu_ps(r + j, _mm_add_ps(_mm_loadu_ps(r + j), _mm_loadu_ps(a + j)));
#endif
	for (; j < N; j++)
		r[j] += a[j];
}

/* d[i] = 0 where the ReLU output act[i] was not positive (act > 0, or NaN, keeps d) */
static void relu_mask(float *d, const float *act, size_t n)
{
	size_t i = 0;
#ifdef __SSE2__
	const __m128 z = _mm_setzero_ps();
	for (; i + 4 <= n; i += 4) {
		__m128 a = _mm_loadu_ps(act + i);
		__m128 keep = _mm_or_ps(_mm_cmpgt_ps(a, z), _mm_cmpunord_ps(a, a));
		_mm_storeu_ps(d + i, _mm_and_ps(keep, _mm_loadu_ps(d + i)));
	}
#endif
	for (; i < n; i++)
		d[i] = act[i] > 0.0f || act[i] != act[i] ? d[i] : 0.0f;
}

static void gemm(const struct tf_mlp_gemm *g, int tx, int tw, size_t M, size_t K, size_t N,
                 const float *X, size_t ldx, const float *W, size_t ldw, float *C, size_t ldc)
{
	if (g->replica)
		tf_slice_gemm(g->replica, tx, tw, M, K, N, X, ldx, W, ldw, C, ldc);
	else
		tf_mxu_gemm(g->cfg, tx, tw, M, K, N, X, ldx, W, ldw, C, ldc, NULL);
}

/* C = X . op(W) with W from a pack when there is one, else gemm(g, 0, trans_w, ...). */
static void gemm_w(const struct tf_mlp_gemm *g, const struct tf_mxu_wpack *p, int trans_w,
                   size_t M, size_t K, size_t N, const float *X, size_t ldx, const float *W,
                   size_t ldw, float *C, size_t ldc)
{
	if (!p)
		gemm(g, 0, trans_w, M, K, N, X, ldx, W, ldw, C, ldc);
	else if (g->replica)
		tf_slice_gemm_wpack(g->replica, 0, M, X, ldx, p, C, ldc);
	else
		tf_mxu_gemm_wpack(g->cfg, 0, M, X, ldx, p, C, ldc, NULL);
}

static void packs_set(struct tf_mlp_packs *p, const struct tf_mlp *m, const struct tf_mxu_cfg *cfg,
                      int backward)
{
	for (int l = 0; l < m->nlayers; l++) {
		size_t K = m->size[l], N = m->size[l + 1];
		const float *W = m->params + m->w_off[l];
		if (!p->fwd[l])
			p->fwd[l] = tf_mxu_wpack_new();
		tf_mxu_wpack_set(p->fwd[l], cfg, 0, K, N, W, N);
		if (l == 0 || !backward)
			continue; /* no dA for the input layer */
		if (!p->bwd[l])
			p->bwd[l] = tf_mxu_wpack_new();
		tf_mxu_wpack_set(p->bwd[l], cfg, 1, N, K, W, N);
	}
}

void tf_mlp_packs_update(struct tf_mlp_packs *p, const struct tf_mlp *m,
                         const struct tf_mxu_cfg *cfg)
{
	packs_set(p, m, cfg, 1);
}

void tf_mlp_packs_forward(struct tf_mlp_packs *p, const struct tf_mlp *m,
                          const struct tf_mxu_cfg *cfg)
{
	packs_set(p, m, cfg, 0);
}

void tf_mlp_packs_release(struct tf_mlp_packs *p)
{
	if (!p)
		return;
	for (int l = 0; l < TF_MLP_MAX_LAYERS; l++) {
		tf_mxu_wpack_free(p->fwd[l]);
		tf_mxu_wpack_free(p->bwd[l]);
	}
	memset(p, 0, sizeof *p);
}

void tf_mlp_forward(const struct tf_mlp *m, const struct tf_mlp_gemm *g, struct tf_mlp_work *w,
                    const float *x, size_t n)
{
	const float *in = x;
	for (int l = 0; l < m->nlayers; l++) {
		size_t K = m->size[l], N = m->size[l + 1];
		float *out = w->act[l + 1];
		const float *b = m->params + m->b_off[l];
		gemm_w(g, g->packs ? g->packs->fwd[l] : NULL, 0, n, K, N, in, K,
		       m->params + m->w_off[l], N, out, N);
		if (l + 1 < m->nlayers)
			for (size_t i = 0; i < n; i++)
				bias_relu(out + i * N, b, N);
		else
			for (size_t i = 0; i < n; i++)
				add_rows(out + i * N, b, N);
		in = out;
	}
}

double tf_mlp_loss(const struct tf_mlp *m, const float *z, int32_t y, int *correct)
{
	if (m->binary) {
		/* BCE with logits: max(z,0) - z*y + log(1 + exp(-|z|)) */
		float t = (float)y;
		*correct = (z[0] > 0.0f) == (y == 1);
		return (double)(fmaxf(z[0], 0.0f) - z[0] * t + log1pf(expf(-fabsf(z[0]))));
	}
	size_t C = (size_t)m->classes, arg = 0;
	float mx = z[0];
	for (size_t j = 1; j < C; j++)
		if (z[j] > mx) {
			mx = z[j];
			arg = j;
		}
	float s = 0.0f;
	for (size_t j = 0; j < C; j++)
		s += expf(z[j] - mx);
	*correct = arg == (size_t)y;
	/* s >= 1: the arg-max term is exp(0) */
	// cppcheck-suppress invalidFunctionArg
	return (double)(logf(s) - (z[y] - mx));
}

/* p = softmax(z) over C classes, shifted by the largest logit so expf cannot overflow. */
static void softmax(const float *z, size_t C, float *p)
{
	float mx = z[0], s = 0.0f;
	for (size_t j = 1; j < C; j++)
		mx = z[j] > mx ? z[j] : mx;
	for (size_t j = 0; j < C; j++) {
		p[j] = expf(z[j] - mx);
		s += p[j];
	}
	float inv = 1.0f / s;
	for (size_t j = 0; j < C; j++)
		p[j] *= inv;
}

void tf_mlp_probs(const struct tf_mlp *m, const float *logits, size_t n, float *out)
{
	size_t C = tf_mlp_outputs(m);
	for (size_t i = 0; i < n; i++) {
		const float *z = logits + i * C;
		float *p = out + i * C;
		if (m->binary)
			p[0] = 1.0f / (1.0f + expf(-z[0]));
		else
			softmax(z, C, p);
	}
}

/* The training pass; with `defer`, dW_l = A_l^T . dZ_l is not computed but kept for
 * tf_mlp_grad_range (dZ_l packed, x borrowed) and counted against the replica. */
static void train_pass(const struct tf_mlp *m, const struct tf_mlp_gemm *g, struct tf_mlp_work *w,
                       const float *x, const int32_t *y, size_t n, size_t scale_rows, int defer)
{
	int L = m->nlayers;
	size_t C = m->size[L];
	const float inv = 1.0f / (float)scale_rows;
	w->loss_sum = 0;
	w->correct = 0;
	w->x = x;
	w->rows = n;
	if (n == 0) {
		memset(w->grad, 0, m->nparams * sizeof(float));
		return;
	}
	tf_mlp_forward(m, g, w, x, n);

	/* loss and dL/dlogits, scaled so replica sums give the global batch mean */
	for (size_t i = 0; i < n; i++) {
		const float *z = w->act[L] + i * C;
		int ok;
		w->loss_sum += tf_mlp_loss(m, z, y[i], &ok);
		w->correct += (size_t)ok;
		float *d = w->dz[L - 1] + i * C;
		if (m->binary) {
			d[0] = (1.0f / (1.0f + expf(-z[0])) - (float)y[i]) * inv;
			continue;
		}
		softmax(z, C, d);
		for (size_t j = 0; j < C; j++)
			d[j] = (d[j] - (j == (size_t)y[i] ? 1.0f : 0.0f)) * inv;
	}

	struct tf_mxu_cfg cfg;
	if (defer)
		tf_slice_mxu_cfg(g->replica->rt, &cfg);
	for (int l = L - 1; l >= 0; l--) {
		size_t K = m->size[l], N = m->size[l + 1];
		const float *a = l == 0 ? x : w->act[l], *dz = w->dz[l];
		/* dW = A^T . dZ  (K x N), through the MXU with K' = rows of the shard */
		if (!defer) {
			gemm(g, 1, 0, K, n, N, a, K, dz, N, w->grad + m->w_off[l], N);
		} else {
			if (!w->dzpack[l])
				w->dzpack[l] = tf_mxu_wpack_new();
			tf_mxu_wpack_set(w->dzpack[l], &cfg, 0, n, N, dz, N);
			tf_slice_gemm_count(g->replica, K, n, N);
		}
		/* db = column sums of dZ, rows in order */
		float *db = w->grad + m->b_off[l];
		memset(db, 0, N * sizeof(float));
		for (size_t i = 0; i < n; i++)
			add_rows(db, dz + i * N, N);
		if (l == 0)
			break;
		/* dA = dZ . W^T (n x K), then through the ReLU of layer l */
		gemm_w(g, g->packs ? g->packs->bwd[l] : NULL, 1, n, N, K, dz, N,
		       m->params + m->w_off[l], N, w->dz[l - 1], K);
		relu_mask(w->dz[l - 1], w->act[l], n * K);
	}
}

void tf_mlp_train_pass(const struct tf_mlp *m, const struct tf_mlp_gemm *g, struct tf_mlp_work *w,
                       const float *x, const int32_t *y, size_t n, size_t scale_rows)
{
	train_pass(m, g, w, x, y, n, scale_rows, 0);
}

void tf_mlp_train_pass_deferred(const struct tf_mlp *m, const struct tf_mlp_gemm *g,
                                struct tf_mlp_work *w, const float *x, const int32_t *y, size_t n,
                                size_t scale_rows)
{
	train_pass(m, g, w, x, y, n, scale_rows, 1);
}

void tf_mlp_grad_range(const struct tf_mlp *m, const struct tf_mxu_cfg *cfg,
                       const struct tf_mlp_work *w, size_t lo, size_t hi, float *out)
{
	if (w->rows == 0) {
		memset(out, 0, (hi - lo) * sizeof(float));
		return;
	}
	/* the layout, layer by layer: kernel (K x N), then bias (N) */
	for (int l = 0; l < m->nlayers && lo < hi; l++) {
		size_t K = m->size[l], N = m->size[l + 1];
		size_t w0 = m->w_off[l], b0 = m->b_off[l], b1 = b0 + N;
		if (lo < b0) {
			size_t e = hi < b0 ? hi : b0;
			const float *a = l == 0 ? w->x : w->act[l];
			tf_mxu_gemm_wpack_range(cfg, 1, K, a, K, w->dzpack[l], lo - w0, e - w0, out);
			out += e - lo;
			lo = e;
		}
		if (lo < hi && lo < b1) {
			size_t e = hi < b1 ? hi : b1;
			memcpy(out, w->grad + lo, (e - lo) * sizeof(float));
			out += e - lo;
			lo = e;
		}
	}
}
