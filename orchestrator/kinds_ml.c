/* kinds_ml.c — data_prep, train and evaluate steps (ml/steps.h); not wired in this build
 * yet, so these step types report that they are unavailable. */
#include "orchestrator/kinds.h"

const tf_step_kind_fn tf_kind_data_prep = NULL;
const tf_step_kind_fn tf_kind_train = NULL;
const tf_step_kind_fn tf_kind_evaluate = NULL;
