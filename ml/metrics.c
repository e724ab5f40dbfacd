/* metrics.c — AUC by sorting scores once per class (see metrics.h). */
#include "ml/metrics.h"

#include "common/common.h"

#include <math.h>
#include <stdlib.h>

struct scored {
	float s; /* score */
	int pos; /* 1 when the example is in the positive class */
};

/* A total order: NaN scores (a diverged model) sort below every number and equal each other,
 * so the sort is well defined and ties are found with the same test. */
static int cmp_scored(const void *a, const void *b)
{
	float x = ((const struct scored *)a)->s, y = ((const struct scored *)b)->s;
	if (isnan(x) || isnan(y))
		return !isnan(x) - !isnan(y);
	return (x > y) - (x < y);
}

/* AUC of one positive class, or NaN when it is not defined. */
static double auc_one(struct scored *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_scored);
	double npos = 0, rank_sum = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1; /* always progresses, even when v[i].s is NaN */
		while (j < n && !cmp_scored(&v[j], &v[i]))
			j++;
		double avg_rank = ((double)i + 1 + (double)j) / 2.0; /* ranks i+1..j */
		for (size_t k = i; k < j; k++)
			if (v[k].pos) {
				rank_sum += avg_rank;
				npos++;
			}
		i = j;
	}
	double nneg = (double)n - npos;
	if (npos == 0 || nneg == 0)
		return NAN;
	return (rank_sum - npos * (npos + 1) / 2.0) / (npos * nneg);
}

double tf_metrics_auc(const float *probs, size_t n, size_t width, const int32_t *y)
{
	struct scored *v = tf_xmalloc(n * sizeof *v + 1);
	double sum = 0;
	int defined = 0;
	size_t classes = width == 1 ? 1 : width;
	for (size_t c = 0; c < classes; c++) {
		for (size_t i = 0; i < n; i++) {
			v[i].s = probs[i * width + (width == 1 ? 0 : c)];
			v[i].pos = width == 1 ? y[i] == 1 : y[i] == (int32_t)c;
		}
		double a = auc_one(v, n);
		if (!isnan(a)) {
			sum += a;
			defined++;
		}
	}
	free(v);
	return defined ? sum / defined : NAN;
}
