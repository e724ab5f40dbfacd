/* metrics.h — classification metrics over predicted probabilities. */
#ifndef TF_ML_METRICS_H
#define TF_ML_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* ROC AUC by the rank statistic (Mann-Whitney U, ties counted half). For width 1 (binary
 * models: p = P(label 1)) the plain AUC; for width C the macro average of the C one-vs-rest
 * AUCs, skipping classes with no positive or no negative example. NaN when none is defined. */
double tf_metrics_auc(const float *probs, size_t n, size_t width, const int32_t *y);

#endif
