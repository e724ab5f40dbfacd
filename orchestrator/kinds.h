/* kinds.h — the built-in step kinds, shared between kinds.c (the table, register, deploy),
 * kinds_shell.c and kinds_ml.c. Internal to the orchestrator. */
#ifndef TF_KINDS_H
#define TF_KINDS_H

#include "orchestrator/engine.h"

/* Each NULL when this build lacks the part that implements it. */
extern const tf_step_kind_fn tf_kind_shell;
extern const tf_step_kind_fn tf_kind_data_prep;
extern const tf_step_kind_fn tf_kind_train;
extern const tf_step_kind_fn tf_kind_evaluate;

/* A `with` value as a number (JSON number or numeric string): 0, -ENOENT, -EINVAL. */
int tf_kind_with_number(const json_t *with, const char *key, double *out);

/* Appends a captured stream (the file at `path`, if any) to the attempt's log under a
 * "==> title <==" line. */
void tf_kind_append_log(FILE *log, const char *title, const char *path);

#endif
