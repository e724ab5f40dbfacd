/* mxu_model.c — SCALE-Sim's analytical cycle model for weight- and output-stationary dataflows
 * (scalesim/compute/systolic_compute_{ws,os}.py; https://github.com/scalesim-project/scale-sim-v2).
 *
 * WS: rows <- K, cols <- N, T = M; folds = ceil(K/R) * ceil(N/C); each fold costs R cycles to
 * shift the weights in, then T + R + C - 2 cycles for the skewed stream to fill, pass and
 * drain: 2R + C + T - 2. SCALE-Sim prints folds * that - 1 (its last 0-based cycle index).
 * OS: rows <- M, cols <- N, T = K; R + C + T - 2 per fold. IS: rows <- K, cols <- M, T = N;
 * like WS (the stationary inputs are shifted in first). Folds are independent, so a core
 * with several MXUs runs ceil(folds / mxus) rounds. */
#include "accel/mxu.h"

#include <errno.h>
#include <string.h>

static uint64_t cdiv(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

int tf_mxu_model(enum tf_mxu_dataflow df, uint64_t M, uint64_t K, uint64_t N, int R, int C,
                 int mxus, struct tf_mxu_model *out)
{
	uint64_t rows_dim, cols_dim, T;

	if (R <= 0 || C <= 0 || mxus < 0)
		return -EINVAL;
	if (mxus == 0)
		mxus = 1;
	switch (df) {
	case TF_MXU_WS:
		rows_dim = K, cols_dim = N, T = M;
		break;
	case TF_MXU_OS:
		rows_dim = M, cols_dim = N, T = K;
		break;
	case TF_MXU_IS:
		rows_dim = K, cols_dim = M, T = N;
		break;
	default:
		return -EINVAL;
	}
	struct tf_mxu_model m;
	memset(&m, 0, sizeof m);
	if (M && K && N) {
		/* Counts past 2^64 once wrapped to nonsense (negative as signed JSON integers). */
		if (__builtin_mul_overflow(cdiv(rows_dim, (uint64_t)R), cdiv(cols_dim, (uint64_t)C),
		                           &m.folds) ||
		    __builtin_add_overflow(T, (df == TF_MXU_OS ? (uint64_t)R : 2 * (uint64_t)R) +
		                                  (uint64_t)C - 2,
		                           &m.cycles_per_fold) ||
		    __builtin_mul_overflow(m.folds, m.cycles_per_fold, &m.cycles) ||
		    m.cycles > (uint64_t)INT64_MAX)
			return -EOVERFLOW;
		m.scalesim_total = m.cycles - 1;
		m.core_cycles = cdiv(m.folds, (uint64_t)mxus) * m.cycles_per_fold;
		/* Sum over folds of used rows * used cols is rows_dim * cols_dim exactly. */
		double rc = (double)R * (double)C;
		m.mapping_efficiency = (double)rows_dim * (double)cols_dim / ((double)m.folds * rc);
		double macs = (double)M * (double)N * (double)K;
		m.utilization = macs / ((double)m.cycles * rc);
		m.core_utilization = macs / ((double)m.core_cycles * rc * mxus);
		m.scalesim_utilization =
		    m.scalesim_total ? macs / ((double)m.scalesim_total * rc) : 1.0;
		double fold_cycles = df == TF_MXU_OS
		                         ? (double)(R + C + T - 2)
		                         : (double)(2 * (uint64_t)R + 2 * (uint64_t)C + T - 3);
		m.compute_utilization = (double)rows_dim * (double)cols_dim * (double)T /
		                        ((double)m.folds * rc * fold_cycles);
	}
	*out = m;
	return 0;
}
